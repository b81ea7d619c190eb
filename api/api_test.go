package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ragtime"
	"ragtime/admission"
	"ragtime/internal/golden"
	"ragtime/pipeline"
	"ragtime/pipeline/pipelinetest"
)

// scriptedAsker writes a fixed sequence of events, as the pipeline would.
type scriptedAsker struct{ got pipeline.Request }

func (a *scriptedAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	a.got = *req
	_ = out.Meta(pipeline.Meta{QueryID: "q1", TopK: req.TopK, RerankTopN: req.RerankTopN, MaxTokens: req.MaxTokens})
	_ = out.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: "embed", DurationMs: 0.5}})
	_ = out.Sources(nil)
	_ = out.Delta(pipeline.Delta{Text: "line one\nline two <b>", Reasoning: true})
	_ = out.Delta(pipeline.Delta{Text: "answer"})
	ttft := 1.5
	rec := ragtime.Record{QueryID: "q1", Figures: ragtime.Figures{TTFTMs: &ttft}}
	_ = out.Done(rec)
	return &rec
}

type mapReader map[string]ragtime.Record

func (m mapReader) GetQuery(ctx context.Context, id string) (ragtime.Record, error) {
	rec, ok := m[id]
	if !ok {
		return rec, fmt.Errorf("reading query %s: %w", id, ragtime.ErrNotFound)
	}
	return rec, nil
}

func newTestServer(t *testing.T, deps Deps) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(NewServer(deps))
	t.Cleanup(ts.Close)
	return ts
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	return getWith(t, url, "")
}

func TestSSEFraming(t *testing.T) {
	t.Parallel()
	asker := &scriptedAsker{}
	ts := newTestServer(t, Deps{Asker: asker})
	status, body, h := get(t, ts.URL+"/ask?q=hi&top_k=7")
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") || h.Get("Cache-Control") != "no-cache" {
		t.Fatalf("status %d headers %v", status, h)
	}
	// The whole stream, byte for byte (retry, ids and the done event
	// included): testdata/sse_framing.golden.
	golden.Check(t, "sse_framing.golden", []byte(body))
	if asker.got.TopK != 7 || asker.got.RerankTopN != 3 || asker.got.MaxTokens != pipeline.DefaultMaxTokens {
		t.Errorf("request %+v", asker.got)
	}
}

func TestPostAskFilters(t *testing.T) {
	t.Parallel()
	asker := &scriptedAsker{}
	ts := newTestServer(t, Deps{Asker: asker})
	resp, err := http.Post(ts.URL+"/ask", "application/json; charset=utf-8",
		strings.NewReader(`{"question":"q","top_k":4,"rerank_top_n":0,"filters":{"doc_id":["a.md"],"metadata":{"type":"html"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if asker.got.RerankTopN != 0 || asker.got.Filter.DocIDs[0] != "a.md" || asker.got.Filter.Metadata["type"] != "html" {
		t.Errorf("request %+v", asker.got)
	}
}

func TestStatusTable(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{
		Asker:   &scriptedAsker{},
		Queries: mapReader{"known": {QueryID: "known", Status: "ok"}},
		Ready: map[string]ReadyCheck{
			"index":    func(context.Context) error { return nil },
			"postgres": func(context.Context) error { return errors.New("connection refused") },
		},
	})
	tests := []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/queries/unknown", 404, "not_found"},
		{"/no/such/route", 404, "not_found"},
		{"/readyz", 503, ""},
		{"/healthz", 200, ""},
		{"/v1/queries/known", 200, ""},
		{"/ask?q=hi&topk=3", 400, "unknown_parameter"}, // a typo is not silently the default
		{"/ask?q=hi&top_k=3&doc_id=a.md&doc_id=b.md&max_tokens=9&rerank_top_n=1&model=m", 200, ""},
	}
	for _, tt := range tests {
		status, body, _ := get(t, ts.URL+tt.path)
		if status != tt.status {
			t.Errorf("%s: status %d, want %d (%s)", tt.path, status, tt.status, body)
			continue
		}
		if tt.code != "" {
			var e struct{ Error apiError }
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != tt.code {
				t.Errorf("%s: body %s, want code %s", tt.path, body, tt.code)
			}
		}
	}
	_, body, _ := get(t, ts.URL+"/readyz")
	if !strings.Contains(body, `"postgres":"connection refused"`) || !strings.Contains(body, `"index":"ok"`) {
		t.Errorf("readyz body %s", body)
	}
}

// TestReadyzDegraded: a check failing with ErrDegraded (the database away
// while a spool keeps the records) answers 200 "degraded"; any other
// failure still answers 503. ReadyDetails' keys are in the body.
func TestReadyzDegraded(t *testing.T) {
	t.Parallel()
	var indexDown atomic.Bool
	ts := newTestServer(t, Deps{
		Asker: &scriptedAsker{},
		Ready: map[string]ReadyCheck{
			"index": func(context.Context) error {
				if indexDown.Load() {
					return errors.New("index not loaded")
				}
				return nil
			},
			"postgres": func(context.Context) error { return fmt.Errorf("unreachable; records are spooled: %w", ErrDegraded) },
		},
		ReadyDetails: func() map[string]any {
			return map[string]any{"recorder": map[string]any{"spool": map[string]int{"records": 3}}}
		},
	})
	status, body, _ := get(t, ts.URL+"/readyz")
	if status != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, `"index":"ok"`) ||
		!strings.Contains(body, `records are spooled`) || !strings.Contains(body, `"spool":{"records":3}`) {
		t.Errorf("readyz = %d %s, want 200 degraded with the spool", status, body)
	}
	indexDown.Store(true)
	if status, body, _ := get(t, ts.URL+"/readyz"); status != 503 || !strings.Contains(body, `"status":"unavailable"`) {
		t.Errorf("readyz with the index down = %d %s, want 503", status, body)
	}
}

// askerFunc runs a query by calling itself.
type askerFunc func(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record

func (f askerFunc) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	return f(ctx, req, out)
}

// TestDoneEventCarriesEveryFigure sends a record with every field set
// through the done event, replays it with the Client and reads it back from
// GET /v1/queries/{id}: a field added to ragtime.Figures that the stream or
// the client drops, or a Record field the API does not answer, fails it.
func TestDoneEventCarriesEveryFigure(t *testing.T) {
	t.Parallel()
	full := pipelinetest.FullRecord("sweep-1")
	asker := askerFunc(func(_ context.Context, _ *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		_ = out.Meta(pipeline.Meta{QueryID: full.QueryID, Model: full.Model})
		_ = out.Done(full)
		return &full
	})
	ts := newTestServer(t, Deps{Asker: asker, Queries: mapReader{full.QueryID: full}})

	req := pipeline.Request{Question: "q", TopK: 3, RerankTopN: 1, MaxTokens: 8}
	got := (&Client{BaseURL: ts.URL}).Run(context.Background(), &req, pipeline.Discard{})
	if got.Status != ragtime.StatusOK {
		t.Fatalf("replayed status %s: %s", got.Status, got.ErrorMessage)
	}
	if !reflect.DeepEqual(got.DoneEvent(), full.DoneEvent()) {
		t.Errorf("done event replayed as\n%+v\nwant\n%+v", got.DoneEvent(), full.DoneEvent())
	}

	status, body, _ := get(t, ts.URL+"/v1/queries/"+full.QueryID)
	if status != http.StatusOK {
		t.Fatalf("GET /v1/queries/{id}: %d %s", status, body)
	}
	var stored ragtime.Record
	if err := json.Unmarshal([]byte(body), &stored); err != nil {
		t.Fatal(err)
	}
	if !stored.CreatedAt.Equal(full.CreatedAt) {
		t.Errorf("created_at %v, want %v", stored.CreatedAt, full.CreatedAt)
	}
	stored.CreatedAt = full.CreatedAt
	if !reflect.DeepEqual(stored, full) {
		t.Errorf("GET /v1/queries/{id} answered\n%+v\nwant\n%+v", stored, full)
	}
}

// TestClientWaitsOutAdmission: a Client refused with 503 and Retry-After
// (the server's one stream is busy) asks again after the wait and gets its
// answer, instead of losing the measurement.
func TestClientWaitsOutAdmission(t *testing.T) {
	t.Parallel()
	ctl, err := admission.New(admission.Config{MaxStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := make(chan struct{})
	var calls atomic.Int32
	asker := askerFunc(func(_ context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		rec := ragtime.Record{QueryID: fmt.Sprint("q", calls.Add(1)), Status: ragtime.StatusOK}
		_ = out.Meta(pipeline.Meta{QueryID: rec.QueryID})
		if req.Question == "hold" {
			close(held)
			<-release
		}
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker, Admission: ctl})
	var waits atomic.Int32
	var waitCode atomic.Value
	c := &Client{BaseURL: ts.URL, OnWait: func(status int, code string, wait time.Duration) {
		waits.Add(1)
		waitCode.Store(fmt.Sprint(status, " ", code))
	}}
	first := make(chan *ragtime.Record)
	go func() {
		first <- c.Run(context.Background(), &pipeline.Request{Question: "hold", TopK: 1, MaxTokens: 1}, pipeline.Discard{})
	}()
	<-held
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	got := c.Run(context.Background(), &pipeline.Request{Question: "q", TopK: 1, MaxTokens: 1}, pipeline.Discard{})
	if got.Status != ragtime.StatusOK {
		t.Fatalf("the refused ask ended %s %s: %s", got.Status, got.ErrorCode, got.ErrorMessage)
	}
	if rec := <-first; rec.Status != ragtime.StatusOK {
		t.Fatalf("the first ask ended %s", rec.Status)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d asks ran, want 2", n)
	}
	if code, _ := waitCode.Load().(string); waits.Load() == 0 || code != "503 server_busy" {
		t.Errorf("OnWait called %d times, last with %q; want at least once with 503 server_busy", waits.Load(), code)
	}
}

// TestResumeBeyondTheBufferSaysSo: a resume that needs events the bounded
// buffer already dropped gets one error event resume_gap, not an answer
// with a hole in it; a resume within the buffer gets the events after its
// Last-Event-ID.
// TestResumeReplaysTheEventsAsSent: a resume frames the kept events again
// (a token keeps its text, the sources event its sources): what it replays
// is byte for byte what the first connection was sent, even when the
// caller changes the sources it handed over afterwards.
func TestResumeReplaysTheEventsAsSent(t *testing.T) {
	t.Parallel()
	wrote, finish := make(chan struct{}), make(chan struct{})
	const events = 9 // meta to the last token
	asker := askerFunc(func(_ context.Context, _ *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		_ = out.Meta(pipeline.Meta{QueryID: "q1", Model: "m"})
		_ = out.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: "search", Seq: 1, StartMs: 0.25, DurationMs: 1.5, Attrs: map[string]any{"k": 4, "store": "<e&m>"}}})
		rerank := 0.75
		src := []pipeline.Source{
			{Rank: 1, ChunkID: "c1", DocID: "d1", Title: "A \"title\"", Score: 0.5, RerankScore: &rerank, Text: "line one\nline two <b> & \u2028"},
			{Rank: 2, ChunkID: "c2", DocID: "d2", Title: "B", Score: 0.25, Text: "é 😀"},
		}
		_ = out.Sources(src)
		src[0].Text, src[1].Title, rerank = "changed", "changed", 0.1
		_ = out.Delta(pipeline.Delta{Text: "thinking\n", Reasoning: true})
		for _, tok := range []string{"Hello", " <world>", " \"quoted\"\t", "\u2028 é"} {
			_ = out.Delta(pipeline.Delta{Text: tok})
		}
		_ = out.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: "llm_decode", Seq: 8, Attrs: map[string]any{"chunks": 4}}})
		_ = out.(pipeline.Flusher).Flush() // as the pipeline does before it waits
		close(wrote)
		<-finish
		rec := ragtime.Record{QueryID: "q1", Status: ragtime.StatusOK}
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker})
	// readEvents reads the retry hint and n events, raw.
	readEvents := func(r io.Reader, n int) []string {
		br := bufio.NewReader(r)
		var evs []string
		var cur strings.Builder
		for len(evs) < n {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("after %d events: %v", len(evs), err)
			}
			cur.WriteString(line)
			if line == "\n" {
				if !strings.HasPrefix(cur.String(), "retry:") {
					evs = append(evs, cur.String())
				}
				cur.Reset()
			}
		}
		return evs
	}
	first, err := http.Get(ts.URL + "/ask?q=x")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	sent := readEvents(first.Body, events)
	<-wrote
	for _, from := range []int{0, 3, 6} {
		req, _ := http.NewRequest("GET", ts.URL+"/ask?q=x", nil)
		req.Header.Set("Last-Event-ID", fmt.Sprintf("q1:%d", from))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := readEvents(resp.Body, events-from-1)
		resp.Body.Close()
		if !reflect.DeepEqual(got, sent[from+1:]) {
			t.Errorf("resumed after q1:%d:\n%q\nsent:\n%q", from, got, sent[from+1:])
		}
	}
	close(finish)
}

// TestAQueryThatPanicsDoesNotStopTheServer: a query's panic reaches the
// handler's goroutine (the pipeline raises its goroutines' panics again on
// its caller's), where the server recovers it (Server.runTail: the answer
// runs after the router's frames have returned, out of the Recover
// middleware's reach), and the server goes on answering.
func TestAQueryThatPanicsDoesNotStopTheServer(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	asker := askerFunc(func(_ context.Context, _ *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		if calls.Add(1) == 1 {
			_ = out.Meta(pipeline.Meta{QueryID: "q1"})
			panic("boom")
		}
		return (&scriptedAsker{}).Run(context.Background(), &pipeline.Request{}, out)
	})
	ts := newTestServer(t, Deps{Asker: asker})
	for i := range 2 {
		resp, err := http.Get(ts.URL + "/ask?q=x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if i == 1 && !strings.Contains(string(body), "event: done") {
			t.Errorf("the ask after the panic: %s", body)
		}
	}
}

func TestResumeBeyondTheBufferSaysSo(t *testing.T) {
	t.Parallel()
	wrote, finish := make(chan struct{}), make(chan struct{})
	asker := askerFunc(func(_ context.Context, _ *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		_ = out.Meta(pipeline.Meta{QueryID: "q1"})
		for range 50 {
			_ = out.Delta(pipeline.Delta{Text: strings.Repeat("x", 100)})
		}
		close(wrote)
		<-finish
		rec := ragtime.Record{QueryID: "q1", Status: ragtime.StatusOK}
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker, Stream: StreamOptions{BufferBytes: 2000}})
	first, err := http.Get(ts.URL + "/ask?q=x")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	<-wrote
	resume := func(lastID string) string {
		req, _ := http.NewRequest("GET", ts.URL+"/ask?q=x", nil)
		req.Header.Set("Last-Event-ID", lastID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 4096)
		n, _ := io.ReadAtLeast(resp.Body, buf, 200)
		return string(buf[:n])
	}
	if got := resume("q1:0"); !strings.Contains(got, "event: error") || !strings.Contains(got, `"code":"resume_gap"`) {
		t.Errorf("resume from the start after the buffer dropped it:\n%s", got)
	}
	if got := resume("q1:48"); !strings.Contains(got, "id: q1:49\nevent: token") || strings.Contains(got, "q1:48\n") {
		t.Errorf("resume from q1:48 should start with q1:49:\n%s", got)
	}
	close(finish)
}

// twoPartAsker runs a query in two parts, as the pipeline does
// (pipeline.Pipeline.Begin): Begin sends meta, the answer waits for
// release and sends done.
type twoPartAsker struct {
	begun   chan struct{}
	release chan struct{}
}

func (a twoPartAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	return a.Begin(ctx, req, out)()
}

func (a twoPartAsker) Begin(_ context.Context, _ *pipeline.Request, out pipeline.Stream) func() *ragtime.Record {
	_ = out.Meta(pipeline.Meta{QueryID: "q1"})
	_ = out.(pipeline.Flusher).Flush()
	close(a.begun)
	return func() *ragtime.Record {
		<-a.release
		rec := ragtime.Record{QueryID: "q1", Status: ragtime.StatusOK}
		_ = out.Done(rec)
		return &rec
	}
}

// TestStreamTailIsCountedLoggedAndAdmitted: an /ask stream's answer runs
// after the router has returned (Server.ServeHTTP), and until it ends the
// query is still counted running (shutdown waits for it), still holds its
// admission, and its access line is not yet written; the line then gives
// the stream's whole duration.
func TestStreamTailIsCountedLoggedAndAdmitted(t *testing.T) {
	t.Parallel()
	ctl, err := admission.New(admission.Config{MaxStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	asker := twoPartAsker{begun: make(chan struct{}), release: make(chan struct{})}
	tracked := Track(asker)
	var logged bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ts := newTestServer(t, Deps{Asker: tracked, Admission: ctl, Logger: logger})
	const hold = 150 * time.Millisecond
	body := make(chan string, 1)
	go func() {
		resp, err := http.Get(ts.URL + "/ask?q=x")
		if err != nil {
			body <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body <- string(b)
	}()
	<-asker.begun
	time.Sleep(20 * time.Millisecond) // the handler returns to the router meanwhile
	if n := tracked.Running(); n != 1 {
		t.Errorf("%d queries counted running while the answer streams, want 1", n)
	}
	if status, _, b := get(t, ts.URL+"/ask?q=y"); status != http.StatusServiceUnavailable {
		t.Errorf("a second ask while the first streams: %d %s, want 503 (admission held)", status, b)
	}
	logMu.Lock()
	early := strings.Contains(logged.String(), `path=/ask status=200`)
	logMu.Unlock()
	if early {
		t.Errorf("the stream's access line was written before its answer ended:\n%s", logged.String())
	}
	time.Sleep(hold)
	close(asker.release)
	if b := <-body; !strings.Contains(b, "event: done") {
		t.Fatalf("stream: %s", b)
	}
	if !tracked.Wait(context.Background()) || tracked.Running() != 0 {
		t.Errorf("%d queries still counted running after the stream", tracked.Running())
	}
	logMu.Lock()
	line := logged.String()
	logMu.Unlock()
	i := strings.Index(line, `path=/ask status=200 ms=`)
	if i < 0 {
		t.Fatalf("no access line for the stream:\n%s", line)
	}
	var ms float64
	if _, err := fmt.Sscanf(line[i+len(`path=/ask status=200 ms=`):], "%g", &ms); err != nil || ms < float64(hold/time.Millisecond) {
		t.Errorf("access line ms %v (%v), want the stream's whole duration, over %v:\n%s", ms, err, hold, line)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestResumeAfterTheAnswerFinished: a client cut off mid-answer whose
// answer then finishes before it reconnects (a loaded machine, a long
// retry) still gets the rest of the answer, done included, when it
// resumes within the grace; it used to get 204 and lose the answer.
func TestResumeAfterTheAnswerFinished(t *testing.T) {
	t.Parallel()
	cut, finished := make(chan struct{}), make(chan struct{})
	asker := askerFunc(func(_ context.Context, _ *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		defer close(finished)
		_ = out.Meta(pipeline.Meta{QueryID: "q-late", Model: "m"})
		_ = out.Delta(pipeline.Delta{Text: "first"})
		_ = out.(pipeline.Flusher).Flush()
		<-cut
		// Well inside the grace (twice the 2 s retry): the server has seen
		// the client go by then.
		time.Sleep(500 * time.Millisecond)
		for _, tok := range []string{" second", " third"} {
			_ = out.Delta(pipeline.Delta{Text: tok})
		}
		rec := ragtime.Record{QueryID: "q-late", Status: ragtime.StatusOK}
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker})
	first, err := http.Get(ts.URL + "/ask?q=x")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(first.Body)
	for seen := ""; !strings.Contains(seen, `"first"`); {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("before the first token: %v", err)
		}
		seen += line
	}
	first.Body.Close()
	close(cut)
	<-finished
	req, _ := http.NewRequest("GET", ts.URL+"/ask?q=x", nil)
	req.Header.Set("Last-Event-ID", "q-late:1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `" second"`) || !strings.Contains(string(body), `" third"`) ||
		!strings.Contains(string(body), "event: done") || strings.Contains(string(body), `"first"`) {
		t.Fatalf("resume after the answer finished: %d\n%s", resp.StatusCode, body)
	}
	// A reconnect from the done event on has nothing left to get: 204.
	i := strings.LastIndex(string(body), "id: q-late:")
	doneID := strings.TrimSpace(strings.SplitN(string(body)[i+len("id: "):], "\n", 2)[0])
	req.Header.Set("Last-Event-ID", doneID)
	again, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.StatusCode != http.StatusNoContent {
		t.Errorf("reconnect after done (%s): %d, want 204", doneID, again.StatusCode)
	}
}
