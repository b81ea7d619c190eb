package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// A paced fixture is a provider's stream as it goes over the wire, with
// lines "#pace DURATION" between its parts: the replay server flushes what
// it wrote so far, then waits that long, so the client sees the original
// pacing (time to first token, gaps between tokens). The directives are not
// sent.

// paceGate ties a replay's pauses to what the client has done, so that a
// test can bound the client's timestamps by the pacing whatever the
// scheduler does. Sleeping alone bounds only when the server wrote: a client
// that is starved after its first read stamps the first token late but the
// last one on time, and its decode then looks shorter than the pauses.
type paceGate struct {
	// wrote is closed by the client's httptrace WroteRequest hook, which runs
	// after the generator's own (hooks in the context compose, newest
	// first): the first pause starts after the client stamped WroteRequest.
	wrote chan struct{}
	// first is closed when the first delta reached the caller (its At is
	// stamped before): every later pause starts after FirstToken.
	first chan struct{}
}

func newPaceGate() *paceGate {
	return &paceGate{wrote: make(chan struct{}), first: make(chan struct{})}
}

// trace is ctx with the hook that closes g.wrote.
func (g *paceGate) trace(ctx context.Context) context.Context {
	var once sync.Once
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			once.Do(func() { close(g.wrote) })
		}
	}})
}

// pacedReplay serves testdata/name with its pacing. head, when > 0, stops
// after that many paced parts and holds the response open until the client
// goes away (closing gone).
func pacedReplay(t *testing.T, name, contentType string, head int, gone chan<- struct{}) http.HandlerFunc {
	t.Helper()
	return gatedReplay(t, name, contentType, head, gone, nil)
}

// gatedReplay is pacedReplay whose first pause also waits for gate.wrote and
// every later one for gate.first (nil: time alone). Each fixture's first
// delta comes after its first pause and before its second.
func gatedReplay(t *testing.T, name, contentType string, head int, gone chan<- struct{}, gate *paceGate) http.HandlerFunc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("reading fixture: %v", err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if gone != nil {
			defer func() {
				if r.Context().Err() != nil {
					close(gone)
				}
			}()
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Request-Id", "req_"+name)
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		f.Flush()
		parts := 0
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			line := sc.Text()
			if d, ok := strings.CutPrefix(line, "#pace "); ok {
				f.Flush()
				parts++
				if head > 0 && parts > head {
					break
				}
				pause, err := time.ParseDuration(d)
				if err != nil {
					t.Errorf("%s: bad pace %q", name, d)
					return
				}
				if gate != nil {
					wait := gate.first
					if parts == 1 {
						wait = gate.wrote
					}
					select {
					case <-r.Context().Done():
						return
					case <-wait:
					case <-time.After(10 * time.Second):
						t.Errorf("%s: the client never reached pace point %d (the request written, then the first delta)", name, parts)
						return
					}
				}
				select {
				case <-r.Context().Done():
					return
				case <-time.After(pause):
				}
				continue
			}
			if _, err := io.WriteString(w, line+"\n"); err != nil {
				return
			}
		}
		f.Flush()
		if head > 0 {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
				t.Error("the client never cancelled the upstream request")
			}
		}
	}
}

// provider builds a generator for a base URL.
type provider struct {
	name        string
	contentType string
	path        string // base URL suffix
	build       func(cfg Config) (gen interface {
		pipeline.Generator
		CloseIdleConnections()
	}, err error)
}

var providers = map[string]provider{
	ProviderOpenAI: {ProviderOpenAI, "text/event-stream", "/v1", func(c Config) (interface {
		pipeline.Generator
		CloseIdleConnections()
	}, error) {
		return NewOpenAI(c)
	}},
	ProviderAnthropic: {ProviderAnthropic, "text/event-stream", "/v1", func(c Config) (interface {
		pipeline.Generator
		CloseIdleConnections()
	}, error) {
		return NewAnthropic(c)
	}},
	ProviderOllama: {ProviderOllama, "application/x-ndjson", "", func(c Config) (interface {
		pipeline.Generator
		CloseIdleConnections()
	}, error) {
		return NewOllama(c)
	}},
}

func buildFor(t *testing.T, p provider, base string, mod ...func(*Config)) pipeline.Generator {
	t.Helper()
	cfg := Config{BaseURL: base + p.path, Model: "m-test", APIKey: testKey}
	for _, m := range mod {
		m(&cfg)
	}
	g, err := p.build(cfg)
	if err != nil {
		t.Fatalf("building %s: %v", p.name, err)
	}
	t.Cleanup(g.CloseIdleConnections)
	return g
}

func TestProviderStreamsReplayed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fixture  string
		provider string
		want     []wantDelta
		usage    ragtime.Usage
		timings  map[string]float64
		// Lower bounds from the fixture's pacing: the first token cannot
		// arrive before the pauses ahead of it, nor the last before the
		// pauses between them. The replay's gate makes them bounds on the
		// client's stamps (WroteRequest, FirstToken), not only on the
		// server's writes.
		ttftAtLeast   time.Duration
		decodeAtLeast time.Duration
	}{
		{
			fixture: "paced_openai_cached.sse", provider: ProviderOpenAI,
			want:        []wantDelta{{"Prefill", false}, {" is", false}, {" cached [1].", false}},
			usage:       ragtime.Usage{PromptTokens: 2006, CompletionTokens: 4, CachedTokens: new(1920)},
			ttftAtLeast: 30 * time.Millisecond, decodeAtLeast: 20 * time.Millisecond,
		},
		{
			fixture: "paced_vllm_reasoning.sse", provider: ProviderOpenAI,
			want:        []wantDelta{{"The user", true}, {" asks why.", true}, {"Because", false}, {" prefill.", false}},
			usage:       ragtime.Usage{PromptTokens: 512, CompletionTokens: 18, CachedTokens: new(256)},
			timings:     map[string]float64{"server_queue_ms": 3.5, "server_prefill_ms": 18.25},
			ttftAtLeast: 25 * time.Millisecond, decodeAtLeast: 30 * time.Millisecond,
		},
		{
			fixture: "paced_deepseek_reasoning.sse", provider: ProviderOpenAI,
			want:        []wantDelta{{"嗯，用户", true}, {"问的是首字延迟。", true}, {"首字延迟", false}, {"由预填充决定。", false}},
			usage:       ragtime.Usage{PromptTokens: 96, CompletionTokens: 41, CachedTokens: new(64), ReasoningTokens: 29},
			ttftAtLeast: 40 * time.Millisecond, decodeAtLeast: 24 * time.Millisecond,
		},
		{
			fixture: "paced_llamacpp_timings.sse", provider: ProviderOpenAI,
			want:        []wantDelta{{"Prompt", false}, {" length", false}, {" sets TTFT.", false}},
			usage:       ragtime.Usage{PromptTokens: 512, CachedTokens: new(384)},
			timings:     map[string]float64{"server_prefill_ms": 31.204, "server_decode_ms": 24.87},
			ttftAtLeast: 35 * time.Millisecond, decodeAtLeast: 24 * time.Millisecond,
		},
		{
			fixture: "paced_groq_usage.sse", provider: ProviderOpenAI,
			want:        []wantDelta{{"Fast", false}, {" answer.", false}},
			usage:       ragtime.Usage{PromptTokens: 300, CompletionTokens: 2},
			timings:     map[string]float64{"server_queue_ms": 21.3, "server_prefill_ms": 12.5},
			ttftAtLeast: 20 * time.Millisecond, decodeAtLeast: 5 * time.Millisecond,
		},
		{
			fixture: "paced_ollama_thinking.ndjson", provider: ProviderOllama,
			want: []wantDelta{{"Okay,", true}, {" the user asks.", true}, {"Prefill", false}, {" dominates.", false}},
			// Ollama sends no cached count: nil, unknown, not 0
			usage:       ragtime.Usage{PromptTokens: 412, CompletionTokens: 28},
			timings:     map[string]float64{"server_load_ms": 1204.5, "server_prefill_ms": 96.25, "server_decode_ms": 220},
			ttftAtLeast: 30 * time.Millisecond, decodeAtLeast: 30 * time.Millisecond,
		},
		{
			fixture: "paced_anthropic_thinking.sse", provider: ProviderAnthropic,
			want:        []wantDelta{{"Let me think", true}, {" about prefill.", true}, {"Prefill reads", false}, {" the prompt [1].", false}},
			usage:       ragtime.Usage{PromptTokens: 1842, CompletionTokens: 57, CachedTokens: new(1800)},
			ttftAtLeast: 30 * time.Millisecond, decodeAtLeast: 30 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			p := providers[tt.provider]
			gate := newPaceGate()
			srv := newServer(t, gatedReplay(t, tt.fixture, p.contentType, 0, nil, gate))
			g := buildFor(t, p, srv.URL)
			var got []pipeline.Delta
			gen, err := generate(gate.trace(context.Background()), g, testRequest, func(d pipeline.Delta) error {
				if len(got) == 0 {
					close(gate.first)
				}
				got = append(got, d)
				return nil
			})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d deltas %+v, want %d", len(got), got, len(tt.want))
			}
			for i, d := range got {
				if d.Text != tt.want[i].text || d.Reasoning != tt.want[i].reasoning {
					t.Errorf("delta %d = (%q, reasoning %v), want (%q, reasoning %v)", i, d.Text, d.Reasoning, tt.want[i].text, tt.want[i].reasoning)
				}
			}
			if !reflect.DeepEqual(gen.Usage, tt.usage) {
				t.Errorf("Usage = %+v, want %+v", gen.Usage, tt.usage)
			}
			if len(gen.ServerTimings) != len(tt.timings) {
				t.Errorf("ServerTimings = %v, want %v", gen.ServerTimings, tt.timings)
			}
			for k, v := range tt.timings {
				if got := gen.ServerTimings[k]; got < v-1e-9 || got > v+1e-9 {
					t.Errorf("ServerTimings[%s] = %v, want %v", k, got, v)
				}
			}
			if gen.Provider != tt.provider || gen.UpstreamStatus != 200 || gen.RequestID != "req_"+tt.fixture {
				t.Errorf("provider %q status %d request id %q", gen.Provider, gen.UpstreamStatus, gen.RequestID)
			}
			if ttft := gen.FirstToken.Sub(gen.WroteRequest); ttft < tt.ttftAtLeast {
				t.Errorf("time to first token %v, but the fixture paces it at %v or more", ttft, tt.ttftAtLeast)
			}
			if decode := gen.LastToken.Sub(gen.FirstToken); decode < tt.decodeAtLeast {
				t.Errorf("decode %v, but the fixture paces it at %v or more", decode, tt.decodeAtLeast)
			}
			if !gen.FirstToken.Equal(got[0].At) || !gen.LastToken.Equal(got[len(got)-1].At) {
				t.Errorf("FirstToken/LastToken are not the first and last deltas' times")
			}
		})
	}
}

func TestAnthropicErrorEventMidStream(t *testing.T) {
	t.Parallel()
	p := providers[ProviderAnthropic]
	srv := newServer(t, pacedReplay(t, "paced_anthropic_error.sse", p.contentType, 0, nil))
	g := buildFor(t, p, srv.URL, func(c *Config) { c.MaxRetries = 3 })
	got, gen, err := collect(t, g, context.Background(), testRequest)
	pe := checkError(t, err, CodeUnavailable, ragtime.StageLLMDecode)
	if !strings.Contains(pe.Message, "overloaded_error: Overloaded") {
		t.Errorf("message %q does not carry the provider's error", pe.Message)
	}
	if len(got) != 1 || got[0].Text != "Partial" {
		t.Errorf("deltas %+v, want the one before the error", got)
	}
	if gen.Retries != 0 {
		t.Errorf("retried %d times after a token reached the client", gen.Retries)
	}
	if gen.Usage.CacheCreationTokens != 1500 || gen.Usage.PromptTokens != 2400 {
		t.Errorf("usage %+v, want the message_start cache write", gen.Usage)
	}
}

// TestProviderCancelMidStream cancels each provider after its first delta:
// the result is llm_cancelled (never nil with a partial answer), the server
// sees the request go away, and no goroutine is left behind.
func TestProviderCancelMidStream(t *testing.T) {
	fixtures := map[string]string{
		ProviderOpenAI:    "paced_openai_cached.sse",
		ProviderAnthropic: "paced_anthropic_thinking.sse",
		ProviderOllama:    "paced_ollama_thinking.ndjson",
	}
	for name, fixture := range fixtures {
		t.Run(name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			p := providers[name]
			gone := make(chan struct{})
			srv := httptest.NewServer(pacedReplay(t, fixture, p.contentType, 2, gone))
			cfg := Config{BaseURL: srv.URL + p.path, Model: "m", APIKey: testKey}
			g, err := p.build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var got []string
			gen, err := generate(ctx, g, testRequest, func(d pipeline.Delta) error {
				got = append(got, d.Text)
				cancel()
				return nil
			})
			if err == nil {
				t.Fatalf("Generate returned nil after cancellation, with %q", got)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error %v does not wrap context.Canceled", err)
			}
			checkError(t, err, CodeCancelled, ragtime.StageLLMDecode)
			if len(got) == 0 || gen.FirstToken.IsZero() {
				t.Errorf("deltas %q, first token %v", got, gen.FirstToken)
			}
			waitGone(t, gone)
			g.CloseIdleConnections()
			srv.Close()
		})
	}
}

func TestProviderRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider   string
		wantPath   string
		wantHeader map[string]string
		wantBody   string
	}{
		{
			provider: ProviderAnthropic, wantPath: "/v1/messages",
			wantHeader: map[string]string{"X-Api-Key": testKey, "Anthropic-Version": AnthropicVersion, "Authorization": "", "Accept": "text/event-stream"},
			wantBody:   `{"model":"m-test","max_tokens":64,"system":"Answer from the context.","messages":[{"role":"user","content":"What is prefill?"}],"stream":true}`,
		},
		{
			provider: ProviderOllama, wantPath: "/api/chat",
			wantHeader: map[string]string{"Authorization": "Bearer " + testKey, "Accept": "application/x-ndjson"},
			wantBody:   `{"model":"m-test","messages":[{"role":"system","content":"Answer from the context."},{"role":"user","content":"What is prefill?"}],"stream":true,"options":{"num_predict":64}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.provider, func(t *testing.T) {
			p := providers[tt.provider]
			var path atomic.Value
			var header http.Header
			var body []byte
			fixture := map[string]string{ProviderAnthropic: "paced_anthropic_thinking.sse", ProviderOllama: "paced_ollama_thinking.ndjson"}[tt.provider]
			replay := pacedReplay(t, fixture, p.contentType, 0, nil)
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				path.Store(r.URL.Path)
				header = r.Header.Clone()
				body, _ = io.ReadAll(r.Body)
				replay(w, r)
			}))
			g := buildFor(t, p, srv.URL)
			if _, _, err := collect(t, g, context.Background(), testRequest); err != nil {
				t.Fatal(err)
			}
			if path.Load() != tt.wantPath {
				t.Errorf("path %v, want %s", path.Load(), tt.wantPath)
			}
			for k, v := range tt.wantHeader {
				if header.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, header.Get(k), v)
				}
			}
			if string(body) != tt.wantBody {
				t.Errorf("body\n%s\nwant\n%s", body, tt.wantBody)
			}
		})
	}
}

func TestOllamaBaseURLForms(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"", "http://h:11434", "http://h:11434/", "http://h:11434/api", "http://h:11434/v1"} {
		g, err := NewOllama(Config{BaseURL: base, Model: "qwen3"})
		if err != nil {
			t.Fatalf("%q: %v", base, err)
		}
		want := "http://h:11434"
		if base == "" {
			want = OllamaBaseURL
		}
		if g.base != want {
			t.Errorf("%q: base %q, want %q", base, g.base, want)
		}
	}
	a, err := NewAnthropic(Config{Model: "claude"})
	if err != nil || a.base != AnthropicBaseURL {
		t.Errorf("anthropic default base %v %v", a, err)
	}
}

func TestRetriesBeforeFirstTokenOnly(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var mu sync.Mutex
	var bodies []string // each attempt's body, sent with its length
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		mu.Lock()
		if err != nil || r.ContentLength != int64(len(b)) {
			bodies = append(bodies, fmt.Sprintf("Content-Length %d, %d bytes read, %v", r.ContentLength, len(b), err))
		} else {
			bodies = append(bodies, string(b))
		}
		mu.Unlock()
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit_error"}}`)
		case 2:
			w.WriteHeader(503)
			_, _ = io.WriteString(w, `{"error":{"message":"overloaded"}}`)
		default:
			replay(t, "basic.sse")(w, r)
		}
	}))
	g := newOpenAIClient(t, srv.URL+"/v1", func(c *Config) { c.MaxRetries = 2 })
	got, gen, err := collect(t, g, context.Background(), testRequest)
	if err != nil {
		t.Fatalf("Generate after two retryable failures: %v", err)
	}
	if gen.Retries != 2 || calls.Load() != 3 || len(got) != 4 {
		t.Errorf("retries %d, calls %d, deltas %d; want 2, 3, 4", gen.Retries, calls.Load(), len(got))
	}
	if !gen.RequestStart.Before(gen.GotConn) {
		t.Errorf("RequestStart is not the first attempt's")
	}
	if len(bodies) != 3 || !strings.HasPrefix(bodies[0], "{") || bodies[1] != bodies[0] || bodies[2] != bodies[0] {
		t.Errorf("the attempts' bodies differ or are not JSON with their length: %q", bodies)
	}

	// No retry for what retrying cannot fix, nor beyond MaxRetries.
	for _, tc := range []struct {
		status, retries int
		wantCalls       int32
	}{{401, 3, 1}, {404, 3, 1}, {500, 1, 2}} {
		calls.Store(0)
		srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(tc.status)
		}))
		g := newOpenAIClient(t, srv.URL+"/v1", func(c *Config) { c.MaxRetries = tc.retries })
		_, _, err := collect(t, g, context.Background(), testRequest)
		if err == nil || calls.Load() != tc.wantCalls {
			t.Errorf("HTTP %d with %d retries: %d calls (want %d), err %v", tc.status, tc.retries, calls.Load(), tc.wantCalls, err)
		}
	}

	// A drop after the first token reached the client is not retried.
	calls.Store(0)
	dropSrv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"half\"}}]}\n\n")
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	g = newOpenAIClient(t, dropSrv.URL+"/v1", func(c *Config) { c.MaxRetries = 3 })
	got, _, err = collect(t, g, context.Background(), testRequest)
	if err == nil || calls.Load() != 1 || len(got) != 1 {
		t.Errorf("drop after a token: %d calls, %d deltas, err %v; want 1 call and an error", calls.Load(), len(got), err)
	}
}

func TestListModels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		provider, path, body string
		want                 []string
	}{
		{ProviderOpenAI, "/v1/models", `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"},{"id":"o3"}]}`, []string{"gpt-4o-mini", "o3"}},
		{ProviderAnthropic, "/v1/models", `{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5"}],"has_more":false}`, []string{"claude-sonnet-4-5"}},
		{ProviderOllama, "/api/tags", `{"models":[{"name":"qwen3:8b","model":"qwen3:8b","size":5200000000}]}`, []string{"qwen3:8b"}},
	}
	for _, tt := range tests {
		t.Run(tt.provider, func(t *testing.T) {
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != tt.path {
					http.NotFound(w, r)
					return
				}
				_, _ = io.WriteString(w, tt.body)
			}))
			p := providers[tt.provider]
			g := buildFor(t, p, srv.URL).(interface {
				ListModels(context.Context) ([]string, error)
			})
			got, err := g.ListModels(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if js, _ := json.Marshal(got); string(js) != mustJSON(tt.want) {
				t.Errorf("models %s, want %s", js, mustJSON(tt.want))
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestConnectHints(t *testing.T) {
	t.Parallel()
	// An https URL to a plain-HTTP server.
	plain := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	g := newOpenAIClient(t, strings.Replace(plain.URL, "http://", "https://", 1)+"/v1", func(c *Config) {
		c.Getenv = func(k string) string {
			return map[string]string{"HTTPS_PROXY": "http://user:hunter2@proxy.example:3128", "NO_PROXY": "127.0.0.1"}[k]
		}
	})
	_, _, err := collect(t, g, context.Background(), testRequest)
	pe := checkError(t, err, CodeConnect, ragtime.StageLLMConnect)
	if !strings.Contains(pe.Hint, "http://") || !strings.Contains(pe.Hint, "HTTPS_PROXY=http://user:xxxxx@proxy.example:3128") {
		t.Errorf("hint %q names neither http:// nor the proxy variable", pe.Hint)
	}
	if strings.Contains(pe.Hint, "hunter2") {
		t.Errorf("hint %q shows the proxy password", pe.Hint)
	}
}

// newStream2 adapts a dialect's parser constructor for the benchmarks.
func (d openaiDialect) newStream2(g *pipeline.Generation, e func(pipeline.Delta) error) stream {
	return d.newStream(g, e, upstream.Scrubber{})
}
func (d anthropicDialect) newStream2(g *pipeline.Generation, e func(pipeline.Delta) error) stream {
	return d.newStream(g, e, upstream.Scrubber{})
}
func (d ollamaDialect) newStream2(g *pipeline.Generation, e func(pipeline.Delta) error) stream {
	return d.newStream(g, e, upstream.Scrubber{})
}
