package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/llm/sim"
)

// jaegerBinary returns the Jaeger v2 binary: $RAGTIME_JAEGER (make test
// sets it from scripts/ensure-jaeger.sh), else what the script builds or
// already cached.
func jaegerBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("RAGTIME_JAEGER"); p != "" {
		return p
	}
	out, err := exec.Command("../../scripts/ensure-jaeger.sh").Output()
	if err != nil {
		t.Fatalf("the Jaeger test needs the jaeger binary: scripts/ensure-jaeger.sh failed: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// jaeger is a running Jaeger v2 (all in memory) on loopback.
type jaeger struct {
	otlpHTTP, otlpGRPC, query string // base URLs
}

// freePort reserves a free loopback port and releases it for the caller.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// jaegerConfig is a Jaeger v2 configuration: OTLP receivers and the query
// service (API and UI) on the given loopback ports, traces in memory, no
// telemetry ports of its own.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    max_clock_skew_adjust: 0s
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// startJaeger runs Jaeger until the test ends and waits for its query API.
func startJaeger(t testing.TB) *jaeger {
	t.Helper()
	bin := jaegerBinary(t)
	var j *jaeger
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ { // a reserved port may be taken meanwhile
		ports := [4]int{freePort(t), freePort(t), freePort(t), freePort(t)}
		cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
		if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, ports[0], ports[1], ports[2], ports[3]), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		cmd := exec.Command(bin, "--config", "file:"+cfg)
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting jaeger: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		j = &jaeger{otlpHTTP: fmt.Sprintf("http://127.0.0.1:%d", ports[3]), otlpGRPC: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
			query: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
		lastErr = waitForJaeger(j.query, exited)
		if lastErr == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			return j
		}
		_ = cmd.Process.Kill()
		lastErr = fmt.Errorf("%w\njaeger's log:\n%s", lastErr, logs.String())
	}
	t.Fatalf("jaeger did not start: %v", lastErr)
	return nil
}

func waitForJaeger(query string, exited chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("jaeger exited: %v", err)
		default:
		}
		if resp, err := http.Get(query + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("its query API %s did not answer within 60s", query)
}

// otlpSpan is a span as Jaeger's API v3 returns it (OTLP JSON).
type otlpSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Start        string `json:"startTimeUnixNano"`
	End          string `json:"endTimeUnixNano"`
	Attributes   []struct {
		Key   string `json:"key"`
		Value struct {
			String *string `json:"stringValue"`
			Int    *string `json:"intValue"`
			Array  *struct {
				Values []struct {
					String string `json:"stringValue"`
				} `json:"values"`
			} `json:"arrayValue"`
		} `json:"value"`
	} `json:"attributes"`
	Status struct {
		Code any `json:"code"`
	} `json:"status"`
}

func (s otlpSpan) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			switch {
			case a.Value.String != nil:
				return *a.Value.String
			case a.Value.Int != nil:
				return *a.Value.Int
			case a.Value.Array != nil:
				var vs []string
				for _, v := range a.Value.Array.Values {
					vs = append(vs, v.String)
				}
				return strings.Join(vs, "\n")
			}
		}
	}
	return ""
}

func (s otlpSpan) ns(t testing.TB, v string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("span %s: time %q: %v", s.Name, v, err)
	}
	return n
}

// jaegerTrace reads a trace back through Jaeger's query API v3 (raw: no
// adjustments), waiting until it has want spans.
func jaegerTrace(t testing.TB, j *jaeger, traceID string, want int) []otlpSpan {
	t.Helper()
	var spans []otlpSpan
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans = spans[:0]
		resp, err := http.Get(j.query + "/api/v3/traces/" + traceID + "?raw_traces=true")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			var out struct {
				Result struct {
					ResourceSpans []struct {
						Resource struct {
							Attributes []struct {
								Key string `json:"key"`
							} `json:"attributes"`
						} `json:"resource"`
						ScopeSpans []struct {
							Spans []otlpSpan `json:"spans"`
						} `json:"scopeSpans"`
					} `json:"resourceSpans"`
				} `json:"result"`
			}
			if err := json.Unmarshal(body, &out); err != nil {
				t.Fatalf("jaeger's trace %s: %v\n%s", traceID, err, body)
			}
			for _, rs := range out.Result.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					spans = append(spans, ss.Spans...)
				}
			}
			if len(spans) >= want {
				return spans
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger has %d of %d spans of trace %s (last answer %d: %.300s)", len(spans), want, traceID, resp.StatusCode, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// storedStage is a query_stages row.
type storedStage struct {
	name                string
	startMs, durationMs float64
}

// storedTrace reads a query's trace_id, created_at and stages from Postgres.
func storedTrace(t testing.TB, pool *pgxpool.Pool, id string) (string, time.Time, []storedStage) {
	t.Helper()
	ctx := context.Background()
	var traceID *string
	var created time.Time
	if err := pool.QueryRow(ctx, "SELECT trace_id, created_at FROM queries WHERE id = $1", id).Scan(&traceID, &created); err != nil {
		t.Fatalf("reading query %s: %v", id, err)
	}
	if traceID == nil {
		t.Fatalf("query %s has no trace_id", id)
	}
	rows, err := pool.Query(ctx, "SELECT name, start_ms, duration_ms FROM query_stages WHERE query_id = $1 ORDER BY seq", id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var stages []storedStage
	for rows.Next() {
		var s storedStage
		if err := rows.Scan(&s.name, &s.startMs, &s.durationMs); err != nil {
			t.Fatal(err)
		}
		stages = append(stages, s)
	}
	return *traceID, created, stages
}

// traceparentProxy is a loopback reverse proxy in front of the simulator
// that keeps the traceparent header of every request it forwards.
type traceparentProxy struct {
	url  string
	mu   sync.Mutex
	seen []string
}

func startTraceparentProxy(t testing.TB, target string) *traceparentProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &traceparentProxy{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1 // stream the SSE as it comes
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, r.Header.Get("traceparent"))
		p.mu.Unlock()
		// The body goes on as a copy: ReverseProxy hands r.Body to its
		// transport, whose write loop may make its last read (past
		// Content-Length) after the first Flush of the answer has closed
		// r.Body; it then closes the connection to the simulator and the
		// stream is cut (recordingProxy in inference_servers_test.go).
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p.url = "http://" + ln.Addr().String() + u.Path
	return p
}

func (p *traceparentProxy) saw() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// askTraced sends GET /ask with an optional traceparent and returns the
// query id from the done event.
func askTraced(t testing.TB, base, query, traceparent string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/ask?"+query, nil)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var id string
	for _, e := range readEvents(t, resp.Body, nil) {
		if e.Name == "done" {
			var d struct {
				QueryID string `json:"query_id"`
			}
			e.decode(t, &d)
			id = d.QueryID
		}
		if e.Name == "error" {
			t.Fatalf("ask failed: %s", e.Data)
		}
	}
	if id == "" {
		t.Fatalf("no done event")
	}
	return id
}

// chatTraced sends a non-streaming POST /v1/chat/completions with a
// traceparent and returns the query id from its X-Ragtime-Query-Id.
func chatTraced(t testing.TB, base, traceparent string) string {
	t.Helper()
	body := `{"model":"sim-1","max_tokens":6,"messages":[{"role":"user","content":"how is decode timed"}]}`
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	id := resp.Header.Get("X-Ragtime-Query-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("POST /v1/chat/completions: %d (query id %q) %s", resp.StatusCode, id, b)
	}
	return id
}

// TestTracesInJaeger sends asks through serve (against the simulator, behind
// a loopback proxy that records traceparent) with --otlp-endpoint pointing
// at a real Jaeger v2, over OTLP/HTTP and OTLP/gRPC, reads each trace back
// through Jaeger's query API and compares it span by span with the rows in
// Postgres: names, parent/child, start and duration to the microsecond; an
// incoming traceparent is continued, and the model server sees the trace.
func TestTracesInJaeger(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			t.Parallel()
			dbURL, pool := testDB(t)
			env := map[string]string{"DATABASE_URL": dbURL}
			dataDir := ingestCorpus(t, env)
			_, simURL := startSim(t, func(c *sim.Config) {
				c.PrefillMs, c.PrefillMsPerToken, c.ITLMs, c.OutputTokens = 3, 0, 1, 6
			})
			proxy := startTraceparentProxy(t, simURL)
			endpoint := j.otlpHTTP
			if protocol == "grpc" {
				endpoint = j.otlpGRPC
			}
			srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", proxy.url,
				"--llm-model", "sim-1", "--otlp-endpoint", endpoint, "--otlp-protocol", protocol,
				"--trace-url-template", j.query+"/trace/{trace_id}")

			// The caller's trace, one per subtest (they share the Jaeger).
			callerTrace, callerSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			if protocol == "grpc" {
				callerTrace = "5cf92f3577b34da6a3ce929d0e0e4737"
			}
			// The OpenAI-compatible front door continues its caller's trace too.
			chatTrace := strings.Replace(callerTrace, "4", "7", 1)
			ids := []string{
				askTraced(t, srv.url, "q=how+does+prefill+grow&top_k=3&max_tokens=6", ""),
				askTraced(t, srv.url, "q=what+is+ttft&top_k=2&max_tokens=6", "00-"+callerTrace+"-"+callerSpan+"-01"),
				chatTraced(t, srv.url, "00-"+chatTrace+"-"+callerSpan+"-01"),
				// One token: first token = last, a zero-length llm_decode.
				askTraced(t, srv.url, "q=what+is+decode&top_k=2&max_tokens=1", ""),
			}
			eventually(t, "the queries stored", func() bool { return countRows(t, pool, "queries") == len(ids) })

			// trace_url on the API, and an exemplar on /metrics.
			var q struct {
				TraceID  string `json:"trace_id"`
				TraceURL string `json:"trace_url"`
			}
			if code := getJSON(t, srv.url, "/v1/queries/"+ids[1], &q); code != http.StatusOK {
				t.Fatalf("GET /v1/queries/%s: %d", ids[1], code)
			}
			if q.TraceID != callerTrace || q.TraceURL != j.query+"/trace/"+callerTrace {
				t.Errorf("GET /v1/queries/%s: trace_id %q trace_url %q, want the caller's trace %s", ids[1], q.TraceID, q.TraceURL, callerTrace)
			}
			req, _ := http.NewRequest(http.MethodGet, srv.url+"/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// Each bucket keeps its latest exemplar: every one shown is one of
			// these queries' traces, and the llm_decode buckets (the last
			// stage of all three) show at least one.
			traces := map[string]bool{}
			for _, id := range ids {
				var q struct {
					TraceID string `json:"trace_id"`
				}
				if code := getJSON(t, srv.url, "/v1/queries/"+id, &q); code != http.StatusOK || q.TraceID == "" {
					t.Fatalf("GET /v1/queries/%s: %d, trace_id %q", id, code, q.TraceID)
				}
				traces[q.TraceID] = true
			}
			exemplars := exemplarRE.FindAllStringSubmatch(string(metrics), -1)
			decode := 0
			for _, m := range exemplars {
				if !traces[m[2]] {
					t.Errorf("exemplar of an unknown trace: %s", m[0])
				}
				if strings.Contains(m[1], `stage="llm_decode"`) {
					decode++
				}
			}
			if len(exemplars) == 0 || decode == 0 {
				t.Errorf("/metrics has %d trace_id exemplars, %d on llm_decode's buckets", len(exemplars), decode)
			}

			// The query's page links to its trace (screenshot kept with
			// go test -artifacts: docs/tracing-query.png).
			if protocol == "http/protobuf" {
				ctx := newBrowser(t)
				if err := chromedp.Do(ctx, chromedp.Navigate(srv.url+"/queries/"+ids[1]),
					chromedp.WaitVisible(chromedp.CSS(`body[data-done="1"]`))); err != nil {
					t.Fatalf("query page: %v", err)
				}
				link := browse(t, ctx, chromedp.Evaluate[string](`(document.querySelector("#trace-link") || {}).href || ""`))
				if want := j.query + "/trace/" + callerTrace; link != want {
					t.Errorf("the query page links the trace as %q, want %q", link, want)
				}
				screenshot(t, ctx, "tracing-query.png")
			}

			// Stopping serve flushes the traces.
			if err := srv.stop(); err != nil {
				t.Fatal(err)
			}
			seen := proxy.saw()
			for i, id := range ids {
				traceID, created, stages := storedTrace(t, pool, id)
				spans := jaegerTrace(t, j, traceID, len(stages)+2)
				caller := map[int]string{1: callerTrace, 2: chatTrace}[i]
				compareTrace(t, id, traceID, created, stages, spans, caller != "", caller, callerSpan, seen, i == 3)
			}
		})
	}
}

// compareTrace checks one query's spans against its stored rows.
func compareTrace(t *testing.T, id, traceID string, created time.Time, stages []storedStage, spans []otlpSpan,
	continued bool, callerTrace, callerSpan string, seenByModel []string, oneToken bool) {
	t.Helper()
	zeroLength := 0
	if len(spans) != len(stages)+2 {
		t.Errorf("query %s: %d spans in Jaeger for %d stored stages", id, len(spans), len(stages))
	}
	checkSpanTree(t, id, spans, callerSpan)
	named := map[string]otlpSpan{}
	for _, s := range spans {
		if _, dup := named[s.Name]; dup {
			t.Errorf("query %s: two spans named %s", id, s.Name)
		}
		named[s.Name] = s
	}
	root, ok := named["query"]
	if !ok {
		t.Fatalf("query %s: no root span in Jaeger", id)
	}
	if root.attr("ragtime.query_id") != id || !strings.EqualFold(root.TraceID, traceID) {
		t.Errorf("root span of trace %s says query %q, want %s", root.TraceID, root.attr("ragtime.query_id"), id)
	}
	switch {
	case continued && (traceID != callerTrace || root.ParentSpanID != callerSpan):
		t.Errorf("query %s: trace %s, root's parent %q; want the caller's trace %s and span %s", id, traceID, root.ParentSpanID, callerTrace, callerSpan)
	case !continued && root.ParentSpanID != "":
		t.Errorf("query %s: root has a parent %q", id, root.ParentSpanID)
	}
	t0 := created.UnixNano()
	if got := root.ns(t, root.Start); got != t0 {
		t.Errorf("query %s: root starts at %d ns, created_at is %d", id, got, t0)
	}
	chat, ok := named["chat sim-1"]
	if !ok || chat.ParentSpanID != root.SpanID {
		t.Errorf("query %s: no chat span under the root", id)
	}
	if chat.attr("gen_ai.operation.name") != "chat" || chat.attr("gen_ai.request.model") != "sim-1" || chat.attr("gen_ai.provider.name") != "openai" ||
		chat.attr("server.address") != "127.0.0.1" || chat.attr("gen_ai.usage.input_tokens") == "" {
		t.Errorf("query %s: chat span attributes %+v", id, chat.Attributes)
	}
	for _, st := range stages {
		s, ok := named[st.name]
		if !ok {
			t.Errorf("query %s: no span for stored stage %s", id, st.name)
			continue
		}
		wantParent := root.SpanID
		if strings.HasPrefix(st.name, "llm_") {
			wantParent = chat.SpanID
		}
		if s.ParentSpanID != wantParent {
			t.Errorf("query %s: %s's parent %s, want %s", id, st.name, s.ParentSpanID, wantParent)
		}
		start, end := s.ns(t, s.Start), s.ns(t, s.End)
		if wantStart := t0 + usOf(st.startMs)*1000; start != wantStart {
			t.Errorf("query %s: %s starts at t0+%d µs in Jaeger, start_ms %v in Postgres", id, st.name, (start-t0)/1000, st.startMs)
		}
		want := usOf(st.durationMs) * 1000
		if want == 0 {
			// Jaeger's storage exporter rewrites a span whose end is not
			// after its start (jptrace/sanitizer, "negative duration") to
			// last 1 ns and says so in a warning: the span ragtime sent
			// lasted 0 ns, as stored.
			zeroLength++
			if w := s.attr("@jaeger@warnings"); !strings.Contains(w, "Negative duration") {
				t.Errorf("query %s: zero-length %s lasts %d ns in Jaeger without its sanitizer's warning (%q)", id, st.name, end-start, w)
			}
			want = 1
		}
		if got := end - start; got != want {
			t.Errorf("query %s: %s lasts %d ns in Jaeger, duration_ms %v in Postgres", id, st.name, got, st.durationMs)
		}
	}
	if oneToken && zeroLength == 0 {
		t.Errorf("query %s: a one-token answer without a zero-length stage: %+v", id, stages)
	}
	// The model server got the chat span as the parent of its request.
	want := "00-" + strings.ToLower(traceID) + "-" + chat.SpanID + "-01"
	found := false
	for _, tp := range seenByModel {
		found = found || tp == want
	}
	if !found {
		t.Errorf("query %s: the model server never saw traceparent %s (saw %q)", id, want, seenByModel)
	}
}

// checkSpanTree checks that a trace's spans have an id each and form one
// tree: every parent is a span of the trace but the root's, which is the
// caller's span or none.
func checkSpanTree(t *testing.T, id string, spans []otlpSpan, callerSpan string) {
	t.Helper()
	ids := map[string]string{}
	for _, s := range spans {
		if other, dup := ids[s.SpanID]; dup {
			t.Errorf("query %s: %s and %s share span id %s", id, other, s.Name, s.SpanID)
		}
		ids[s.SpanID] = s.Name
	}
	var roots []string
	for _, s := range spans {
		if _, ok := ids[s.ParentSpanID]; !ok {
			roots = append(roots, s.Name)
			if s.ParentSpanID != "" && s.ParentSpanID != callerSpan {
				t.Errorf("query %s: %s's parent %s is neither a span of the trace nor the caller's", id, s.Name, s.ParentSpanID)
			}
		}
		if s.ParentSpanID == s.SpanID {
			t.Errorf("query %s: %s is its own parent", id, s.Name)
		}
	}
	if len(roots) != 1 {
		t.Errorf("query %s: %d roots (%v), want one", id, len(roots), roots)
	}
}

// exemplarRE finds an OpenMetrics exemplar with a trace id: the series and
// the trace id.
var exemplarRE = regexp.MustCompile(`(?m)^(\S+) \S+ # \{trace_id="([0-9a-f]{32})"\}`)

// usOf is milliseconds with µs resolution as whole microseconds.
func usOf(ms float64) int64 { return int64(math.Round(ms * 1000)) }
