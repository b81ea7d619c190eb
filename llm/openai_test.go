package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/internal/upstream/upstreamtest"
	"ragtime/pipeline"
)

// testKey is the API key every test client sends; no error may contain it.
const testKey = "sk-test-SECRETabcdef0123456789"

// replayPause is the pause between replayed events, so deltas arrive in
// separate reads as they do from a real model.
const replayPause = 2 * time.Millisecond

// replay serves testdata/name as an OpenAI event stream, event by event with
// a flush and a short pause after each, byte for byte as stored (CRLF kept).
func replay(t *testing.T, name string) http.HandlerFunc {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("reading fixture: %v", err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("X-Request-Id", "req_"+name)
		w.WriteHeader(http.StatusOK)
		writeEvents(w, r, raw)
	}
}

// writeEvents writes raw line by line, flushing and pausing after every
// blank line (the end of an event).
func writeEvents(w http.ResponseWriter, r *http.Request, raw []byte) {
	f := w.(http.Flusher)
	br := bufio.NewReader(bytes.NewReader(raw))
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if _, werr := io.WriteString(w, line); werr != nil {
				return
			}
		}
		if strings.TrimRight(line, "\r\n") == "" || err != nil {
			f.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(replayPause):
			}
		}
		if err != nil {
			return
		}
	}
}

// newServer starts an httptest server closed at the end of the test.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// newOpenAIClient returns a generator for srv whose idle connections are closed
// at the end of the test (before the server, cleanups run last-in first-out).
func newOpenAIClient(t *testing.T, baseURL string, mod ...func(*OpenAIConfig)) *OpenAI {
	t.Helper()
	cfg := OpenAIConfig{BaseURL: baseURL, Model: "gpt-4o-mini", APIKey: testKey}
	for _, m := range mod {
		m(&cfg)
	}
	g, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	t.Cleanup(g.CloseIdleConnections)
	return g
}

var testRequest = pipeline.GenerateRequest{
	Messages:  []pipeline.Message{{Role: "system", Content: "Answer from the context."}, {Role: "user", Content: "What is prefill?"}},
	MaxTokens: 64,
	Question:  "What is prefill?",
}

// collect runs Generate and returns the deltas emitted.
func collect(t *testing.T, g pipeline.Generator, ctx context.Context, req pipeline.GenerateRequest) ([]pipeline.Delta, pipeline.Generation, error) {
	t.Helper()
	var got []pipeline.Delta
	gen, err := generate(ctx, g, req, func(d pipeline.Delta) error {
		got = append(got, d)
		return nil
	})
	return got, gen, err
}

type wantDelta struct {
	text      string
	reasoning bool
}

func TestOpenAIStreams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fixture string
		want    []wantDelta
		usage   ragtime.Usage
		timings map[string]float64
	}{
		{
			fixture: "basic.sse",
			want:    []wantDelta{{"Prefill", false}, {" reads the", false}, {" whole prompt", false}, {" [2].", false}},
			usage:   ragtime.Usage{PromptTokens: 1200, CompletionTokens: 5, CachedTokens: new(1024)},
		},
		{
			fixture: "crlf_keepalive.sse",
			want:    []wantDelta{{"首字", false}, {`延迟 "TTFT"`, false}},
			usage:   ragtime.Usage{PromptTokens: 812, CompletionTokens: 3, CachedTokens: new(512)},
			timings: map[string]float64{"server_prefill_ms": 143.25, "server_decode_ms": 41.5},
		},
		{
			fixture: "reasoning_content.sse",
			want:    []wantDelta{{"The user asks", true}, {" about prefill.", true}, {"Prefill", false}, {" is quadratic.", false}},
			usage:   ragtime.Usage{PromptTokens: 300, CompletionTokens: 40, CachedTokens: new(0), ReasoningTokens: 32},
		},
		{
			fixture: "reasoning_field.sse",
			want:    []wantDelta{{"Thinking", true}, {" briefly.", true}, {"Done.", false}},
			usage:   ragtime.Usage{PromptTokens: 20, CompletionTokens: 6, ReasoningTokens: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			srv := newServer(t, replay(t, tt.fixture))
			g := newOpenAIClient(t, srv.URL+"/v1")
			got, gen, err := collect(t, g, context.Background(), testRequest)
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
				if i > 0 && d.At.Before(got[i-1].At) {
					t.Errorf("delta %d received before delta %d", i, i-1)
				}
			}
			// The role-only (and empty reasoning) first chunks arrive a pause
			// earlier; they must not count as the first token.
			if !gen.FirstToken.Equal(got[0].At) {
				t.Errorf("FirstToken = %v, want the first non-empty delta's time %v", gen.FirstToken, got[0].At)
			}
			if !gen.LastToken.Equal(got[len(got)-1].At) {
				t.Errorf("LastToken = %v, want the last delta's time %v", gen.LastToken, got[len(got)-1].At)
			}
			if gen.Chunks != len(tt.want) {
				t.Errorf("Chunks = %d, want %d", gen.Chunks, len(tt.want))
			}
			if !reflect.DeepEqual(gen.Usage, tt.usage) {
				t.Errorf("Usage = %+v, want %+v", gen.Usage, tt.usage)
			}
			if fmt.Sprint(gen.ServerTimings) != fmt.Sprint(tt.timings) && !(len(gen.ServerTimings) == 0 && len(tt.timings) == 0) {
				t.Errorf("ServerTimings = %v, want %v", gen.ServerTimings, tt.timings)
			}
			if gen.UpstreamStatus != 200 || gen.RequestID != "req_"+tt.fixture {
				t.Errorf("status %d, request id %q", gen.UpstreamStatus, gen.RequestID)
			}
			if gen.Provider != ProviderOpenAI || gen.Model != "gpt-4o-mini" {
				t.Errorf("provider %q model %q", gen.Provider, gen.Model)
			}
			order := []struct {
				name string
				at   time.Time
			}{{"RequestStart", gen.RequestStart}, {"GotConn", gen.GotConn}, {"WroteRequest", gen.WroteRequest}, {"FirstToken", gen.FirstToken}, {"LastToken", gen.LastToken}}
			for i, o := range order {
				if o.at.IsZero() {
					t.Errorf("%s not recorded", o.name)
				}
				if i > 0 && o.at.Before(order[i-1].at) {
					t.Errorf("%s (%v) before %s (%v)", o.name, o.at, order[i-1].name, order[i-1].at)
				}
			}
		})
	}
}

func TestOpenAIRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		base     string // appended to the server URL
		key      string
		req      pipeline.GenerateRequest
		wantPath string
		wantAuth string
		wantBody string
	}{
		{
			name: "trailing slash, key, configured model", base: "/v1/", key: testKey, req: testRequest,
			wantPath: "/v1/chat/completions", wantAuth: "Bearer " + testKey,
			wantBody: `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"Answer from the context."},{"role":"user","content":"What is prefill?"}],"max_tokens":64,"stream":true,"stream_options":{"include_usage":true}}`,
		},
		{
			name: "no key, model override, no max_tokens", base: "/api/v1", key: "",
			req:      pipeline.GenerateRequest{Model: "qwen3:8b", Messages: []pipeline.Message{{Role: "user", Content: "hi"}}},
			wantPath: "/api/v1/chat/completions", wantAuth: "",
			wantBody: `{"model":"qwen3:8b","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		},
		{
			name: "question only", base: "", key: " " + testKey + "\n",
			req:      pipeline.GenerateRequest{Question: "why?", MaxTokens: 5},
			wantPath: "/chat/completions", wantAuth: "Bearer " + testKey,
			wantBody: `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"why?"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			type seen struct {
				path, auth, accept, ctype string
				body                      []byte
			}
			got := make(chan seen, 1)
			stream := replay(t, "basic.sse")
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got <- seen{r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Accept"), r.Header.Get("Content-Type"), b}
				stream(w, r)
			}))
			g := newOpenAIClient(t, srv.URL+tt.base, func(c *OpenAIConfig) { c.APIKey = tt.key })
			if _, _, err := collect(t, g, context.Background(), tt.req); err != nil {
				t.Fatalf("Generate: %v", err)
			}
			s := <-got
			if s.path != tt.wantPath {
				t.Errorf("path = %q, want %q", s.path, tt.wantPath)
			}
			if s.auth != tt.wantAuth {
				t.Errorf("Authorization = %q, want %q", s.auth, tt.wantAuth)
			}
			if s.accept != "text/event-stream" || s.ctype != "application/json" {
				t.Errorf("Accept %q, Content-Type %q", s.accept, s.ctype)
			}
			if string(s.body) != tt.wantBody {
				t.Errorf("body =\n%s\nwant\n%s", s.body, tt.wantBody)
			}
		})
	}
}

func TestOpenAIConnectionReuse(t *testing.T) {
	t.Parallel()
	srv := newServer(t, replay(t, "basic.sse"))
	g := newOpenAIClient(t, srv.URL+"/v1")
	for i, wantReused := range []bool{false, true, true} {
		_, gen, err := collect(t, g, context.Background(), testRequest)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if gen.Conn.Reused != wantReused {
			t.Errorf("call %d: Conn.Reused = %v, want %v", i, gen.Conn.Reused, wantReused)
		}
		if !wantReused && gen.Conn.Connect <= 0 {
			t.Errorf("call %d: a new connection reported no connect time", i)
		}
		if wantReused && (gen.Conn.Connect != 0 || gen.Conn.DNS != 0 || gen.Conn.TLS != 0) {
			t.Errorf("call %d: a reused connection reported dial times %+v", i, gen.Conn)
		}
	}
}

// errorBody echoes the key the way providers do, in full and masked.
var errorBody = map[int]string{
	401: `{"error":{"message":"Incorrect API key provided: ` + testKey + `. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
	403: `{"error":{"message":"Key sk-test-SEC***************6789 is not allowed to use this project (Authorization: Bearer ` + testKey + `)","type":"permission_error"}}`,
}

func TestOpenAIErrorStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		header    map[string]string
		body      string
		wantCode  string
		wantInMsg []string
		wantHint  []string
	}{
		{name: "401", status: 401, body: errorBody[401], wantCode: CodeAuth, wantInMsg: []string{"HTTP 401", "Incorrect API key provided"}, wantHint: []string{"RAGTIME_LLM_API_KEY", "whitespace"}},
		{name: "403", status: 403, body: errorBody[403], wantCode: CodeAuth, wantInMsg: []string{"HTTP 403"}, wantHint: []string{"RAGTIME_LLM_API_KEY"}},
		{name: "404 model", status: 404, body: `{"error":{"message":"The model ` + "`gpt-9`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}`, wantCode: CodeModelNotFound, wantInMsg: []string{`"gpt-4o-mini"`, "does not exist"}, wantHint: []string{"--llm-model", "gpt-4o-mini"}},
		{name: "404 path", status: 404, body: "404 page not found", wantCode: CodeModelNotFound, wantInMsg: []string{"HTTP 404"}, wantHint: []string{"--llm-model", "--llm-base-url"}},
		{name: "400 ollama model", status: 400, body: `{"error":"model \"gpt-4o-mini\" not found, try pulling it first"}`, wantCode: CodeModelNotFound, wantInMsg: []string{"try pulling it first"}, wantHint: []string{"--llm-model"}},
		{name: "429", status: 429, header: map[string]string{"Retry-After": "7"}, body: `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`, wantCode: CodeRateLimited, wantInMsg: []string{"HTTP 429", "retry after 7s"}, wantHint: []string{"retry after 7s"}},
		{name: "500", status: 500, body: `{"error":{"message":"The server had an error","type":"server_error"}}`, wantCode: CodeUnavailable, wantInMsg: []string{"HTTP 500", "The server had an error"}},
		{name: "502 html", status: 502, body: "<html><body>Bad Gateway</body></html>", wantCode: CodeUnavailable, wantInMsg: []string{"HTTP 502", "Bad Gateway"}},
		{name: "503", status: 503, body: `{"detail":"engine overloaded"}`, wantCode: CodeUnavailable, wantInMsg: []string{"HTTP 503", "engine overloaded"}},
		{name: "408", status: 408, body: ``, wantCode: CodeTimeout, wantInMsg: []string{"HTTP 408"}},
		{name: "400 context length", status: 400, body: `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`, wantCode: CodeBadRequest, wantInMsg: []string{"maximum context length"}, wantHint: []string{"top_k"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Request-Id", "req_err")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			g := newOpenAIClient(t, srv.URL+"/v1")
			got, gen, err := collect(t, g, context.Background(), testRequest)
			pe := checkError(t, err, tt.wantCode, ragtime.StageLLMPrefill)
			if len(got) != 0 {
				t.Errorf("emitted %d deltas on an error", len(got))
			}
			if pe.Status != tt.status || gen.UpstreamStatus != tt.status {
				t.Errorf("status: error %d, generation %d, want %d", pe.Status, gen.UpstreamStatus, tt.status)
			}
			if pe.RequestID != "req_err" || gen.RequestID != "req_err" {
				t.Errorf("request id: error %q, generation %q", pe.RequestID, gen.RequestID)
			}
			for _, s := range tt.wantInMsg {
				if !strings.Contains(pe.Message, s) {
					t.Errorf("message %q does not contain %q", pe.Message, s)
				}
			}
			for _, s := range tt.wantHint {
				if !strings.Contains(pe.Hint, s) {
					t.Errorf("hint %q does not contain %q", pe.Hint, s)
				}
			}
		})
	}
}

// checkError asserts err is a *ragtime.Error with the code and stage and
// that the API key appears nowhere in it.
func checkError(t *testing.T, err error, code, stage string) *ragtime.Error {
	t.Helper()
	var pe *ragtime.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *ragtime.Error", err, err)
	}
	if pe.Code != code || pe.Stage != stage {
		t.Errorf("code %q stage %q, want %q %q (%v)", pe.Code, pe.Stage, code, stage, err)
	}
	if pe.Message == "" || pe.Hint == "" && code != CodeCancelled {
		t.Errorf("missing message or hint: %+v", pe)
	}
	js, _ := json.Marshal(pe)
	for _, s := range []string{err.Error(), pe.Message, pe.Hint, string(js)} {
		for _, secret := range []string{testKey, "SECRET", "6789"} {
			if strings.Contains(s, secret) {
				t.Errorf("error text leaks the key (%q): %s", secret, s)
			}
		}
	}
	return pe
}

func TestOpenAIBadStream(t *testing.T) {
	t.Parallel()
	long := "data: " + strings.Repeat("x", maxLine+10) + "\n\n"
	tests := []struct {
		name      string
		handler   func(t *testing.T) http.HandlerFunc
		wantStage string
		wantDelta int
		wantInMsg string
	}{
		{name: "error object mid-stream", handler: fixture("error_midstream.sse"), wantStage: ragtime.StageLLMDecode, wantDelta: 1, wantInMsg: "The server had an error"},
		{name: "error event", handler: fixture("error_event.sse"), wantStage: ragtime.StageLLMPrefill, wantInMsg: "rate limit reached mid-stream"},
		{name: "unparseable JSON", handler: fixture("bad_json.sse"), wantStage: ragtime.StageLLMPrefill, wantInMsg: `{\"id\":\"chatcmpl-9x1\",\"choices\"`},
		{name: "chunk without choices", handler: fixture("no_choices.sse"), wantStage: ragtime.StageLLMPrefill, wantInMsg: "no choices"},
		{name: "ends without finish", handler: fixture("truncated.sse"), wantStage: ragtime.StageLLMDecode, wantDelta: 2, wantInMsg: "ended before the model finished"},
		{name: "not an event stream", wantStage: ragtime.StageLLMPrefill, wantInMsg: `{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\"`, handler: func(*testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"message":{"role":"assistant","content":"Hi"}}]}`)
			}
		}},
		{name: "line over 1 MiB", wantStage: ragtime.StageLLMPrefill, wantInMsg: "longer than", handler: func(*testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, long)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.handler(t))
			g := newOpenAIClient(t, srv.URL+"/v1")
			got, _, err := collect(t, g, context.Background(), testRequest)
			pe := checkError(t, err, CodeBadStream, tt.wantStage)
			if len(got) != tt.wantDelta {
				t.Errorf("emitted %d deltas, want %d", len(got), tt.wantDelta)
			}
			if !strings.Contains(pe.Message, tt.wantInMsg) {
				t.Errorf("message %q does not contain %q", pe.Message, tt.wantInMsg)
			}
		})
	}
}

func fixture(name string) func(*testing.T) http.HandlerFunc {
	return func(t *testing.T) http.HandlerFunc { return replay(t, name) }
}

// stallingServer streams the first events of basic.sse, then waits for the
// client to go away and reports that on the returned channel.
func stallingServer(t *testing.T, events int) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "basic.sse"))
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.Join(bytes.SplitAfter(raw, []byte("\n\n"))[:events], nil)
	gone := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, r, head)
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(10 * time.Second):
			t.Error("the client never cancelled the upstream request")
		}
	}))
	return srv, gone
}

func waitGone(t *testing.T, gone <-chan struct{}) {
	t.Helper()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not see the request cancelled")
	}
}

func TestOpenAICancelMidStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, gone := stallingServer(t, 3) // role, "Prefill", " reads the"
	g, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "m", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []string
	gen, err := generate(ctx, g, testRequest, func(d pipeline.Delta) error {
		got = append(got, d.Text)
		if len(got) == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v does not wrap context.Canceled", err)
	}
	checkError(t, err, CodeCancelled, ragtime.StageLLMDecode)
	if len(got) != 2 || gen.Chunks != 2 || gen.FirstToken.IsZero() {
		t.Errorf("deltas %q, chunks %d, first token %v", got, gen.Chunks, gen.FirstToken)
	}
	waitGone(t, gone)
	g.CloseIdleConnections()
	srv.Close()
}

func TestOpenAIEmitErrorStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, gone := stallingServer(t, 3)
	g, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	errClientGone := errors.New("client gone")
	calls := 0
	_, err = generate(context.Background(), g, testRequest, func(d pipeline.Delta) error {
		calls++
		return errClientGone
	})
	if err != errClientGone {
		t.Fatalf("Generate returned %v, want the emit error itself", err)
	}
	if calls != 1 {
		t.Errorf("emit called %d times after failing, want 1", calls)
	}
	waitGone(t, gone)
	g.CloseIdleConnections()
	srv.Close()
}

func TestOpenAITTFTTimeout(t *testing.T) {
	t.Parallel()
	srv, gone := stallingServer(t, 1) // headers and the role chunk, then silence
	g := newOpenAIClient(t, srv.URL+"/v1", func(c *OpenAIConfig) { c.TTFTTimeout = 50 * time.Millisecond })
	got, gen, err := collect(t, g, context.Background(), testRequest)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v does not wrap context.DeadlineExceeded", err)
	}
	checkError(t, err, CodeTimeout, ragtime.StageLLMPrefill)
	if len(got) != 0 || !gen.FirstToken.IsZero() || gen.UpstreamStatus != 200 {
		t.Errorf("deltas %v, first token %v, status %d", got, gen.FirstToken, gen.UpstreamStatus)
	}
	waitGone(t, gone)
}

func TestOpenAICallerDeadline(t *testing.T) {
	t.Parallel()
	srv, gone := stallingServer(t, 2)
	g := newOpenAIClient(t, srv.URL+"/v1")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := collect(t, g, ctx, testRequest)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v does not wrap context.DeadlineExceeded", err)
	}
	checkError(t, err, CodeTimeout, ragtime.StageLLMDecode)
	waitGone(t, gone)
}

func TestOpenAIConnectError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more: connection refused

	tests := []struct {
		name      string
		proxy     string
		wantProxy bool
	}{
		{name: "no proxy"},
		{name: "proxy set", proxy: "http://proxy.invalid:3128", wantProxy: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
				t.Setenv(k, "")
			}
			if tt.proxy != "" {
				t.Setenv("HTTPS_PROXY", tt.proxy)
			}
			g := newOpenAIClient(t, "http://"+addr+"/v1")
			_, gen, err := collect(t, g, context.Background(), testRequest)
			pe := checkError(t, err, CodeConnect, ragtime.StageLLMConnect)
			if !strings.Contains(pe.Hint, "--llm-base-url") {
				t.Errorf("hint %q does not name --llm-base-url", pe.Hint)
			}
			if strings.Contains(pe.Hint, "HTTPS_PROXY") != tt.wantProxy {
				t.Errorf("hint %q: mentions HTTPS_PROXY = %v, want %v", pe.Hint, !tt.wantProxy, tt.wantProxy)
			}
			if !gen.GotConn.IsZero() || gen.RequestStart.IsZero() {
				t.Errorf("GotConn %v, RequestStart %v", gen.GotConn, gen.RequestStart)
			}
		})
	}
}

func TestNewOpenAIValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     OpenAIConfig
		wantErr string // "" means valid
	}{
		{name: "valid", cfg: OpenAIConfig{BaseURL: "https://api.openai.com/v1", Model: "gpt-4o-mini"}},
		{name: "valid http with port", cfg: OpenAIConfig{BaseURL: "http://localhost:11434/v1/", Model: "qwen3"}},
		{name: "empty url", cfg: OpenAIConfig{Model: "m"}, wantErr: "--llm-base-url"},
		{name: "no scheme", cfg: OpenAIConfig{BaseURL: "api.openai.com/v1", Model: "m"}, wantErr: "--llm-base-url"},
		{name: "ftp", cfg: OpenAIConfig{BaseURL: "ftp://host/v1", Model: "m"}, wantErr: "--llm-base-url"},
		{name: "no host", cfg: OpenAIConfig{BaseURL: "http:///v1", Model: "m"}, wantErr: "--llm-base-url"},
		{name: "unparseable", cfg: OpenAIConfig{BaseURL: "http://user:" + testKey + "@[::1", Model: "m"}, wantErr: "--llm-base-url"},
		{name: "no model", cfg: OpenAIConfig{BaseURL: "https://api.openai.com/v1", Model: " "}, wantErr: "--llm-model"},
		{name: "key with inner newline", cfg: OpenAIConfig{BaseURL: "https://x.example/v1", Model: "m", APIKey: "sk-abc\nSECRET6789"}, wantErr: "RAGTIME_LLM_API_KEY"},
		{name: "negative timeout", cfg: OpenAIConfig{BaseURL: "https://x.example/v1", Model: "m", Timeout: -time.Second}, wantErr: "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := NewOpenAI(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || g == nil {
					t.Fatalf("NewOpenAI: %v", err)
				}
				g.CloseIdleConnections()
				return
			}
			if err == nil {
				t.Fatalf("NewOpenAI accepted %+v", tt.cfg)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not name %q", err, tt.wantErr)
			}
			for _, secret := range []string{testKey, "SECRET"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q leaks the key", err)
				}
			}
		})
	}
}

// TestOpenAIRetriesAStaleConnection: a server that closes the connection
// after each stream without `Connection: close` (llama-server) leaves the
// client a dead keep-alive connection; the next generation is sent again on
// a fresh connection instead of failing with llm_unavailable, and its
// llm_connect says so. It is not a model retry: Retries stays 0.
func TestOpenAIRetriesAStaleConnection(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.StartClosing(t, replay(t, "basic.sse"))
	g := newOpenAIClient(t, srv.URL+"/v1", func(c *OpenAIConfig) { c.Pool = upstream.NewPool(upstream.Options{}); c.MaxRetries = 0 })
	fresh := 0
	for i := range 4 {
		deltas, gen, err := collect(t, g, context.Background(), testRequest)
		if err != nil {
			t.Fatalf("generation %d: %v", i, err)
		}
		if len(deltas) == 0 || gen.Retries != 0 {
			t.Errorf("generation %d: %d deltas, %d retries", i, len(deltas), gen.Retries)
		}
		if gen.Conn.FreshRetry {
			fresh++
		}
	}
	if fresh == 0 || srv.Dropped.Load() != int64(fresh) || srv.Answered.Load() != 4 {
		t.Errorf("%d fresh retries, server dropped %d and answered %d: the stale connection was not retried",
			fresh, srv.Dropped.Load(), srv.Answered.Load())
	}
}
