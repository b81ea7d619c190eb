package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ragtime"
	"ragtime/admission"
	"ragtime/auth"
	"ragtime/pipeline"
)

// postChat sends body to POST /v1/chat/completions and returns the status,
// headers and body.
func postChat(t *testing.T, base, body string) (int, http.Header, string) {
	t.Helper()
	return sendJSON(t, http.MethodPost, base+"/v1/chat/completions", body)
}

// sendJSON sends body as JSON with method to url and returns the status,
// headers and body.
func sendJSON(t *testing.T, method, url, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// openAIErrBody is OpenAI's error shape.
type openAIErrBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func TestChatCompletionsRefuseBadInputInOpenAIsShape(t *testing.T) {
	t.Parallel()
	asker := &countingAsker{}
	ts := newTestServer(t, Deps{Asker: asker, DefaultModel: "m", AllowedModels: []string{"m", "other"}})
	const user = `"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct {
		body, code, param string
		status            int
	}{
		{`{` + user + `}`, "model_required", "model", 400},
		{`{"model":"m"}`, "messages_required", "messages", 400},
		{`{"model":"m","messages":[]}`, "messages_required", "messages", 400},
		{`{"model":"m",` + user + `,"tools":[]}`, "unsupported_parameter", "tools", 400},
		{`{"model":"m",` + user + `,"tool_choice":"auto"}`, "unsupported_parameter", "tool_choice", 400},
		{`{"model":"m",` + user + `,"logit_bias":{"1":2}}`, "unsupported_parameter", "logit_bias", 400},
		{`{"model":"m",` + user + `,"top_logprobs":2}`, "unsupported_parameter", "top_logprobs", 400},
		{`{"model":"m",` + user + `,"response_format":{"type":"json_object"}}`, "unsupported_parameter", "response_format", 400},
		{`{"model":"m",` + user + `,"stopp":"x"}`, "unknown_field", "stopp", 400},
		{`{"model":"m",` + user + `,"stop":["a","b","c","d","e"]}`, "stop_invalid", "stop", 400},
		{`{"model":"m",` + user + `,"stop":["a",""]}`, "stop_invalid", "stop[1]", 400},
		{`{"model":"m",` + user + `,"stop":7}`, "stop_invalid", "stop", 400},
		{`{"model":"m",` + user + `,"seed":1.5}`, "seed_invalid", "seed", 400},
		{`{"model":"m",` + user + `,"ragtime":{"topk":3}}`, "unknown_field", "ragtime.topk", 400},
		{`{"model":"m",` + user + `,"ragtime":{"top_k":0}}`, "top_k_out_of_range", "ragtime.top_k", 400},
		{`{"model":"m",` + user + `,"ragtime":{"top_k":"5"}}`, "body_invalid", "ragtime.top_k", 400},
		{`{"model":"m",` + user + `,"ragtime":{"lexical_k":"5"}}`, "body_invalid", "ragtime.lexical_k", 400},
		{`{"model":"m",` + user + `,"ragtime":{"vector_k":0}}`, "vector_k_out_of_range", "ragtime.vector_k", 400},
		{`{"model":"m",` + user + `,"max_completion_tokens":0}`, "max_tokens_out_of_range", "max_tokens", 400},
		{`{"model":"m",` + user + `,"ragtime":{"filters":{"doc_id":[""]}}}`, "filters_invalid", "ragtime.filters.doc_id", 400},
		{`{"model":"m",` + user + `,"max_tokens":0}`, "max_tokens_out_of_range", "max_tokens", 400},
		{`{"model":"m",` + user + `,"max_tokens":5,"max_completion_tokens":6}`, "max_tokens_invalid", "max_completion_tokens", 400},
		{`{"model":"m",` + user + `,"temperature":3}`, "temperature_out_of_range", "temperature", 400},
		{`{"model":"m",` + user + `,"n":2}`, "unsupported_parameter", "n", 400},
		{`{"model":"m",` + user + `,"top_p":0.5}`, "unsupported_parameter", "top_p", 400},
		{`{"model":"m",` + user + `,"logprobs":true}`, "unsupported_parameter", "logprobs", 400},
		{`{"model":"m","messages":[{"role":"user","content":"hi","tool_calls":[]}]}`, "unknown_field", "messages[0].tool_calls", 400},
		{`{"model":"m","messages":[{"role":"tool","content":"x"},{"role":"user","content":"hi"}]}`, "messages_invalid", "messages[0].role", 400},
		{`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]}`, "messages_invalid", "messages[1].role", 400},
		{`{"model":"m","messages":[{"role":"user"}]}`, "messages_invalid", "messages[0].content", 400},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, "messages_invalid", "messages[0].content[0]", 400},
		{`{"model":"m","messages":[{"role":"user","content":"  "}]}`, "question_required", "messages[0].content", 400},
		{`{"model":"m","messages":[{"role":"user","content":"a\u0000b"},{"role":"user","content":"q"}]}`, "history_invalid", "messages[0].content", 400},
		{`{"model":"elsewhere",` + user + `}`, "model_denied", "model", 403},
		{`{"model":"m",` + user + `} {}`, "body_invalid", "", 400},
		{`[]`, "body_invalid", "", 400},
	} {
		status, h, body := postChat(t, ts.URL, tt.body)
		var e openAIErrBody
		if err := json.Unmarshal([]byte(body), &e); err != nil || status != tt.status || e.Error.Code != tt.code ||
			e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: %d %s; want %d %s", tt.body, status, body, tt.status, tt.code)
			continue
		}
		if got := ""; e.Error.Param != nil && *e.Error.Param != tt.param || e.Error.Param == nil && tt.param != got {
			t.Errorf("%s: param %v, want %q", tt.body, e.Error.Param, tt.param)
		}
		if h.Get(HeaderQueryID) != "" {
			t.Errorf("%s: a refused request got a query id", tt.body)
		}
	}
	if asker.n.Load() != 0 {
		t.Errorf("%d refused requests reached the pipeline", asker.n.Load())
	}
}

// countingAsker counts the queries that reach it.
type countingAsker struct{ n atomic.Int64 }

func (a *countingAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	a.n.Add(1)
	return &ragtime.Record{}
}

// chatScriptAsker plays a query with reasoning, an answer and sources, and
// keeps the request it was given.
type chatScriptAsker struct {
	got  pipeline.Request
	fail *ragtime.Error
}

func (a *chatScriptAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	a.got = *req
	_ = out.Meta(pipeline.Meta{QueryID: "q1", Model: "sim"})
	_ = out.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: "embed", DurationMs: 0.5}})
	_ = out.Sources([]pipeline.Source{{Rank: 1, ChunkID: "d#0", DocID: "d", Title: "D", Text: "t"}})
	_ = out.Delta(pipeline.Delta{Text: "hmm", Reasoning: true})
	_ = out.Delta(pipeline.Delta{Text: "Hello "})
	if a.fail != nil {
		_ = out.Fail(a.fail)
		return &ragtime.Record{QueryID: "q1", Status: ragtime.StatusError}
	}
	_ = out.Delta(pipeline.Delta{Text: "world [1]"})
	ttft := 1.5
	rec := ragtime.Record{QueryID: "q1", Model: "sim", Figures: ragtime.Figures{TTFTMs: &ttft,
		Usage: ragtime.Usage{PromptTokens: 10, CompletionTokens: 3}}, Stages: []ragtime.Span{{Name: "embed", DurationMs: 0.5}}}
	_ = out.Done(rec)
	return &rec
}

// dataLines returns the data: payloads of an SSE body.
func dataLines(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestChatCompletionStreamsChunksThenRagtimeThenDone(t *testing.T) {
	t.Parallel()
	asker := &chatScriptAsker{}
	ts := newTestServer(t, Deps{Asker: asker, DefaultModel: "sim"})
	status, h, body := postChat(t, ts.URL, `{"model":"sim","stream":true,"stream_options":{"include_usage":true},
		"temperature":0.3,"n":1,"user":"u1","max_completion_tokens":64,
		"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"first"},{"type":"text","text":"turn"}]},
		{"role":"assistant","content":"ok"},{"role":"user","content":"What is TTFT?"}],
		"ragtime":{"top_k":4,"rerank_top_n":2,"filters":{"doc_id":["d"]}}}`)
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") || h.Get(HeaderQueryID) != "q1" {
		t.Fatalf("%d %v\n%s", status, h, body)
	}
	got := asker.got
	if got.Question != "What is TTFT?" || got.Model != "" || got.TopK != 4 || got.RerankTopN != 2 || got.MaxTokens != 64 ||
		got.Temperature == nil || *got.Temperature != 0.3 || len(got.Filter.DocIDs) != 1 || len(got.History) != 3 ||
		got.History[0] != (pipeline.Message{Role: "system", Content: "be brief"}) ||
		got.History[1] != (pipeline.Message{Role: "user", Content: "first\nturn"}) || got.History[2].Role != "assistant" {
		t.Fatalf("request %+v", got)
	}
	lines := dataLines(body)
	if len(lines) != 8 || lines[len(lines)-1] != "[DONE]" {
		t.Fatalf("%d data lines:\n%s", len(lines), body)
	}
	var chunks []chatChunk
	for _, l := range lines[:len(lines)-1] {
		var c chatChunk
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if c.ID != "chatcmpl-q1" || c.Object != "chat.completion.chunk" || c.Model != "sim" || c.Created == 0 {
			t.Errorf("chunk header %s", l)
		}
		chunks = append(chunks, c)
	}
	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	if d := chunks[0].Choices[0].Delta; d.Role != "assistant" || str(d.Content) != "" {
		t.Errorf("first chunk %s", lines[0])
	}
	if d := chunks[1].Choices[0].Delta; str(d.ReasoningContent) != "hmm" || d.Content != nil {
		t.Errorf("reasoning chunk %s", lines[1])
	}
	if str(chunks[2].Choices[0].Delta.Content)+str(chunks[3].Choices[0].Delta.Content) != "Hello world [1]" {
		t.Errorf("content chunks %s %s", lines[2], lines[3])
	}
	if c := chunks[4].Choices[0]; str(c.FinishReason) != "stop" || c.Delta == nil {
		t.Errorf("finish chunk %s", lines[4])
	}
	if len(chunks[5].Choices) != 0 || chunks[5].Usage == nil || chunks[5].Usage.TotalTokens != 13 {
		t.Errorf("usage chunk %s", lines[5])
	}
	if rt := chunks[6].Ragtime; len(chunks[6].Choices) != 0 || rt == nil || rt.QueryID != "q1" || rt.TTFTMs == nil ||
		len(rt.Sources) != 1 || len(rt.Stages) != 1 || !strings.Contains(lines[6], `"ragtime":{"query_id":"q1"`) {
		t.Errorf("ragtime chunk %s", lines[6])
	}
	for i, l := range lines[:5] {
		if strings.Contains(l, `"usage"`) || strings.Contains(l, `"ragtime"`) {
			t.Errorf("chunk %d carries usage or ragtime: %s", i, l)
		}
	}
}

func TestChatCompletionWithoutStream(t *testing.T) {
	t.Parallel()
	asker := &chatScriptAsker{}
	ts := newTestServer(t, Deps{Asker: asker})
	status, h, body := postChat(t, ts.URL, `{"model":"sim-13b","max_tokens":3,"messages":[{"role":"user","content":"What is TTFT?"}]}`)
	var c chatChunk
	if status != 200 || h.Get(HeaderQueryID) != "q1" || !strings.HasPrefix(h.Get("Content-Type"), "application/json") ||
		json.Unmarshal([]byte(body), &c) != nil {
		t.Fatalf("%d %v\n%s", status, h, body)
	}
	if asker.got.Model != "sim-13b" || asker.got.MaxTokens != 3 || len(asker.got.History) != 0 {
		t.Errorf("request %+v", asker.got)
	}
	m := c.Choices[0].Message
	if c.Object != "chat.completion" || c.ID != "chatcmpl-q1" || m == nil || m.Role != "assistant" || *m.Content != "Hello world [1]" ||
		*m.ReasoningContent != "hmm" || *c.Choices[0].FinishReason != "length" || c.Usage == nil || c.Usage.PromptTokens != 10 ||
		c.Ragtime == nil || c.Ragtime.QueryID != "q1" || len(c.Ragtime.Sources) != 1 {
		t.Errorf("completion %s", body)
	}
}

// TestChatStopAndSeedReachTheQuery: stop (a string or an array) and seed,
// which SDKs send (the Vercel AI SDK's stopSequences, LangChain's
// invoke(…, {stop})), are taken and handed to the query for the model.
func TestChatStopAndSeedReachTheQuery(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		fields string
		stop   []string
		seed   int64
	}{
		{`"stop":"\n\n","seed":7`, []string{"\n\n"}, 7},
		{`"stop":["END","Q:"],"seed":-3`, []string{"END", "Q:"}, -3},
		{`"stop":null`, nil, 0},
	} {
		asker := &chatScriptAsker{}
		ts := newTestServer(t, Deps{Asker: asker})
		status, _, body := postChat(t, ts.URL, `{"model":"m",`+tt.fields+`,"messages":[{"role":"user","content":"What is TTFT?"}]}`)
		if status != 200 {
			t.Fatalf("%s: %d %s", tt.fields, status, body)
		}
		if !slices.Equal(asker.got.Stop, tt.stop) || (asker.got.Seed == nil) != (tt.seed == 0) || asker.got.Seed != nil && *asker.got.Seed != tt.seed {
			t.Errorf("%s: stop %q seed %v", tt.fields, asker.got.Stop, asker.got.Seed)
		}
	}
}

func TestChatCompletionFailureInOpenAIsShape(t *testing.T) {
	t.Parallel()
	fail := &ragtime.Error{Stage: "llm_prefill", Kind: ragtime.KindUpstreamAuth, Code: "llm_auth", Message: "the model provider at http://10.0.0.7:8000/v1 rejected the API key", Hint: "check RAGTIME_LLM_API_KEY"}
	var logMu sync.Mutex
	var logged bytes.Buffer
	ts := newTestServer(t, Deps{Asker: &chatScriptAsker{fail: fail}, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))})
	// Not streamed: the status says it, with the error object: the caller's
	// side of it; the model server's address and the serve-side hint go to
	// the log.
	status, h, body := postChat(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	var e openAIErrBody
	if status != http.StatusBadGateway || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "llm_auth" ||
		e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "refused its credentials") || h.Get(HeaderQueryID) != "q1" {
		t.Errorf("%d %s", status, body)
	}
	if strings.Contains(body, "10.0.0.7") || strings.Contains(body, "RAGTIME_LLM_API_KEY") {
		t.Errorf("the caller sees the operator's detail: %s", body)
	}
	logMu.Lock()
	l := logged.String()
	logMu.Unlock()
	if !strings.Contains(l, "http://10.0.0.7:8000/v1") || !strings.Contains(l, "check RAGTIME_LLM_API_KEY") || !strings.Contains(l, "query_id=q1") {
		t.Errorf("the log lacks the operator's detail:\n%s", l)
	}
	// Streamed: the stream ends with the error object, without [DONE].
	status, _, body = postChat(t, ts.URL, `{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`)
	lines := dataLines(body)
	last := lines[len(lines)-1]
	if status != 200 || !strings.HasPrefix(last, `{"error":{"message":"the server's model provider refused its credentials`) || strings.Contains(last, "10.0.0.7") ||
		!strings.Contains(last, `"code":"llm_auth"`) || !strings.Contains(last, `"ragtime":{"query_id":"q1","stage":"llm_prefill"`) ||
		strings.Contains(body, "[DONE]") {
		t.Errorf("stream:\n%s", body)
	}
}

func TestChatQueryIDIsReadableByBrowserApps(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{Asker: &chatScriptAsker{}, CORSOrigins: []string{"https://app.example.com"}})
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"q"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://app.example.com")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), HeaderQueryID) {
		t.Errorf("%d %v", resp.StatusCode, resp.Header)
	}
}

func TestModelsListsWhatTheCallerMayUse(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{Asker: &chatScriptAsker{}, DefaultModel: "sim", AllowedModels: []string{"sim", "org/big"}})
	status, body, _ := get(t, ts.URL+"/v1/models")
	if status != 200 || body != `{"object":"list","data":[{"id":"sim","object":"model","created":0,"owned_by":"ragtime"},{"id":"org/big","object":"model","created":0,"owned_by":"ragtime"}]}`+"\n" {
		t.Errorf("%d %s", status, body)
	}
	if status, body, _ := get(t, ts.URL+"/v1/models/org/big"); status != 200 || body != `{"id":"org/big","object":"model","created":0,"owned_by":"ragtime"}`+"\n" {
		t.Errorf("/v1/models/org/big: %d %s", status, body)
	}
	var e openAIErrBody
	if status, body, _ := get(t, ts.URL+"/v1/models/other"); status != 404 || json.Unmarshal([]byte(body), &e) != nil ||
		e.Error.Code != "not_found" || e.Error.Type != "not_found_error" {
		t.Errorf("/v1/models/other: %d %s", status, body)
	}
}

// slowAsker waits before its answer, as a long prefill does.
type slowAsker struct{ wait time.Duration }

func (a slowAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	_ = out.Meta(pipeline.Meta{QueryID: "q1", Model: "sim"})
	time.Sleep(a.wait)
	_ = out.Delta(pipeline.Delta{Text: "late"})
	rec := ragtime.Record{QueryID: "q1"}
	_ = out.Done(rec)
	return &rec
}

func TestChatStreamSendsHeartbeatsWhileSilent(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{Asker: slowAsker{wait: 300 * time.Millisecond}, Stream: StreamOptions{Heartbeat: 50 * time.Millisecond}})
	status, _, body := postChat(t, ts.URL, `{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`)
	if status != 200 || !strings.Contains(body, ": keep-alive\n\n") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("%d\n%s", status, body)
	}
}

// FuzzChatCompletions: whatever the body, the route answers OpenAI's error
// shape (naming the field for a field's error) or runs a request within
// every bound, its question the last message, and never panics.
func FuzzChatCompletions(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b"},{"role":"user","content":"q"}],"ragtime":{"top_k":3,"rerank_top_n":1,"filters":{"doc_id":["a.md"],"metadata":{"k":"v"}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":9,"max_completion_tokens":9,"temperature":0.5,"n":1,"top_p":1}`,
		`{}`, ``, `[]`, `{"model":1}`, `{"model":"m","messages":{}}`, `{"model":"m","messages":[1]}`,
		`{"model":"m","messages":[{"role":"user","content":{}}]}`, `{"model":"m","messages":[{"role":"user","content":[1]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"q"}],"ragtime":[]}`, `{"model":"m","messages":[null]}`,
		`{"model":"m","messages":[{"role":"user","content":"\u0000"}]}`, `{"model":"m","messages":[{"role":"user","content":"q"}],"ragtime":null}`,
	} {
		f.Add([]byte(s))
	}
	asker := &chatScriptAsker{}
	var mu sync.Mutex
	h := NewServer(Deps{Asker: asker, MaxBodyBytes: 64 << 10, AllowedHosts: []string{"example.com"}}) // httptest.NewRequest's Host
	f.Fuzz(func(t *testing.T, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		asker.got = pipeline.Request{}
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := serve(h, req)
		if w.Code != http.StatusOK {
			var e openAIErrBody
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("status %d with body %q: want OpenAI's error shape", w.Code, w.Body.String())
			}
			if w.Code != http.StatusBadRequest && w.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d (%s)", w.Code, e.Error.Code)
			}
			if aboutAField(e.Error.Code) && (e.Error.Param == nil || *e.Error.Param == "") {
				t.Fatalf("%s (%s) names no param", e.Error.Code, e.Error.Message)
			}
			return
		}
		got := asker.got
		checkAccepted(t, got)
		if err := (&pipeline.Request{Question: "q", TopK: 1, MaxTokens: 1, History: got.History}).Normalize(0); err != nil {
			t.Fatalf("accepted history %+v: %v", got.History, err)
		}
	})
}

// TestChatCompletionsShareAsksLimits: the chat route is admitted like
// /ask, per caller, and its refusals come in OpenAI's shape with
// Retry-After, which OpenAI's clients honour.
func TestChatCompletionsShareAsksLimits(t *testing.T) {
	t.Parallel()
	ctl, err := admission.New(admission.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// One ask per minute: the burst is ten seconds' worth, rounded up to one.
	ts := newTestServer(t, Deps{Asker: &chatScriptAsker{}, Admission: ctl,
		CallerLimits: admission.Limits{Rate: auth.Rate{N: 1, Per: time.Minute}}})
	if status, _, body := get(t, ts.URL+"/ask?q=first"); status != 200 {
		t.Fatalf("the first ask: %d %s", status, body)
	}
	status, h, body := postChat(t, ts.URL, `{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	var e openAIErrBody
	if status != http.StatusTooManyRequests || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "rate_limited" ||
		e.Error.Type != "rate_limit_error" || h.Get("Retry-After") == "" {
		t.Errorf("%d %v %s", status, h, body)
	}
}

// waitingAsker starts a stream and waits for its context to end, as a
// generation does when its client leaves.
type waitingAsker struct{ cancelled chan error }

func (a waitingAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	_ = out.Meta(pipeline.Meta{QueryID: "q1", Model: "sim"})
	select {
	case <-ctx.Done():
		a.cancelled <- context.Cause(ctx)
	case <-time.After(10 * time.Second):
		a.cancelled <- nil
	}
	return &ragtime.Record{QueryID: "q1", Status: ragtime.StatusCancelled}
}

// TestChatClientThatLeavesCancelsItsQuery: a chat stream cannot be
// resumed, so a client that disconnects cancels its query at once.
func TestChatClientThatLeavesCancelsItsQuery(t *testing.T) {
	t.Parallel()
	asker := waitingAsker{cancelled: make(chan error, 1)}
	ts := newTestServer(t, Deps{Asker: asker})
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, first, 6); err != nil || !strings.HasPrefix(string(first), "data: ") {
		t.Fatalf("first chunk %q: %v", first, err)
	}
	resp.Body.Close()
	if cause := <-asker.cancelled; cause == nil {
		t.Error("the query ran on for 10 s after its client left")
	}
}

func TestChatFinishReasonSpeaksOpenAI(t *testing.T) {
	t.Parallel()
	s := &chatStream{maxTokens: 10}
	for _, tt := range []struct {
		provider   string
		completion int
		want       string
	}{
		{"stop", 10, "stop"}, {"length", 3, "length"}, {"end_turn", 10, "stop"}, {"max_tokens", 3, "length"},
		{"stop_sequence", 3, "stop"}, {"", 3, "stop"}, {"", 10, "length"}, {"something_new", 3, "stop"},
	} {
		rec := ragtime.Record{FinishReason: tt.provider, Figures: ragtime.Figures{Usage: ragtime.Usage{CompletionTokens: tt.completion}}}
		if got := *s.finishReason(rec); got != tt.want {
			t.Errorf("provider %q with %d of 10 tokens: %q, want %q", tt.provider, tt.completion, got, tt.want)
		}
	}
}

// TestUnknownV1RoutesAnswerInOpenAIsShape: a route under /v1/ that ragtime
// does not serve (the Vercel AI SDK's default openai(model) posts to
// /v1/responses) gets a 404 in OpenAI's error shape whose message names
// the chat completions route and the SDK's .chat(model); other unknown
// paths keep ragtime's shape.
func TestUnknownV1RoutesAnswerInOpenAIsShape(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{Asker: &countingAsker{}})
	for _, tt := range []struct{ method, path string }{
		{http.MethodPost, "/v1/responses"},
		{http.MethodPost, "/v1/embeddings"},
		{http.MethodGet, "/v1/nothing/here"},
	} {
		status, _, b := sendJSON(t, tt.method, ts.URL+tt.path, `{"model":"m","input":"hi"}`)
		var e openAIErrBody
		if err := json.Unmarshal([]byte(b), &e); err != nil || status != 404 || e.Error.Type != "not_found_error" ||
			e.Error.Code != "not_found" || !strings.Contains(e.Error.Message, "POST /v1/chat/completions") ||
			!strings.Contains(e.Error.Message, "openai.chat(model)") || !strings.Contains(e.Error.Message, tt.path) {
			t.Errorf("%s %s: %d %s", tt.method, tt.path, status, b)
		}
	}
	status, _, _ := get(t, ts.URL+"/nothing")
	if status != 404 {
		t.Errorf("GET /nothing: %d", status)
	}
}

// gatedAsker streams "a", waits for gate (or its context's end), then
// streams "b" and ends; cancelled gets its context's cause.
type gatedAsker struct {
	gate      chan struct{}
	cancelled chan error
}

func (a gatedAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	_ = out.Meta(pipeline.Meta{QueryID: "q1", Model: "sim"})
	_ = out.Delta(pipeline.Delta{Text: "a "})
	select {
	case <-a.gate:
	case <-ctx.Done():
		a.cancelled <- context.Cause(ctx)
		return &ragtime.Record{QueryID: "q1", Status: ragtime.StatusCancelled}
	}
	_ = out.Delta(pipeline.Delta{Text: "b"})
	rec := ragtime.Record{QueryID: "q1", Model: "sim"}
	_ = out.Done(rec)
	return &rec
}

// A resumable chat stream (ragtime.resumable) keeps running when its
// client leaves: its chunks carry ids, and a POST with Last-Event-ID gets
// the ones after it, to [DONE]; a client that does not come back within
// the grace cancels it as client_gone; resumable without stream is refused.
func TestChatResumableStreamResumesHere(t *testing.T) {
	t.Parallel()
	asker := gatedAsker{gate: make(chan struct{}), cancelled: make(chan error, 1)}
	ts := newTestServer(t, Deps{Asker: asker, DefaultModel: "sim", Stream: StreamOptions{Retry: 200 * time.Millisecond}})
	const body = `{"model":"sim","stream":true,"messages":[{"role":"user","content":"q"}],"ragtime":{"resumable":true}}`
	status, _, out := postChat(t, ts.URL, strings.Replace(body, `"stream":true`, `"stream":false`, 1))
	if status != http.StatusBadRequest || !strings.Contains(out, "resumable_needs_stream") {
		t.Fatalf("resumable without stream: %d %s", status, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(seen.String(), `"content":"a "}`) {
		n, err := resp.Body.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("the first chunks %q: %v", seen.String(), err)
		}
	}
	cancel()
	resp.Body.Close()
	if !strings.HasPrefix(seen.String(), "retry: 200\n\nid: q1:0\ndata: ") || !strings.Contains(seen.String(), "\nid: q1:1\ndata: ") {
		t.Fatalf("a resumable stream starts %q, want the retry hint and ids", seen.String())
	}
	close(asker.gate) // the answer goes on with its client away

	req, _ = http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Last-Event-ID", "q1:1")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := dataLines(string(rest))
	if resp.StatusCode != http.StatusOK || len(lines) < 3 || !strings.Contains(lines[0], `"content":"b"`) ||
		lines[len(lines)-1] != "[DONE]" || !strings.Contains(string(rest), "id: q1:2\n") {
		t.Fatalf("the resume: %d %q", resp.StatusCode, rest)
	}
	if strings.Contains(string(rest), `"content":"a "`) {
		t.Errorf("the resume repeats a chunk the client had: %q", rest)
	}

	// Another one, whose client does not come back.
	asker2 := gatedAsker{gate: make(chan struct{}), cancelled: make(chan error, 1)}
	ts2 := newTestServer(t, Deps{Asker: asker2, DefaultModel: "sim", Stream: StreamOptions{Retry: 100 * time.Millisecond}})
	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "POST", ts2.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(buf)
	cancel()
	resp.Body.Close()
	if cause := <-asker2.cancelled; !errors.Is(cause, pipeline.ErrClientGone) {
		t.Errorf("a resumable stream whose client did not come back was cancelled with %v, want client_gone", cause)
	}
}
