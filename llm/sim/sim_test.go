package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"ragtime/internal/jsonappend"
	"ragtime/llm/tokens"

	"ragtime/internal/openaiwire"
)

// startSim runs a simulator with cfg behind a real HTTP server on 127.0.0.1:0.
func startSim(t testing.TB, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	return s, ts
}

// streamEvent is one parsed SSE data line of a chat completion stream.
type streamEvent struct {
	at   time.Time
	done bool
	raw  string
	// c is decoded strictly: the simulator's hand-written chunks must have
	// exactly the shared wire type's fields.
	c openaiwire.Chunk
}

func post(t testing.TB, ctx context.Context, url, key string, body any) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// decodeStrict decodes data into v, failing on a field v does not declare.
func decodeStrict(data string, v any) error {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func readStream(t testing.TB, r io.Reader) []streamEvent {
	t.Helper()
	var evs []streamEvent
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			if line != "" {
				t.Fatalf("unexpected stream line %q", line)
			}
			continue
		}
		ev := streamEvent{at: time.Now(), raw: data}
		if data == "[DONE]" {
			ev.done = true
		} else if err := decodeStrict(data, &ev.c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

func chatBody(stream bool, user string) map[string]any {
	return map[string]any{
		"model":          "m",
		"stream":         stream,
		"stream_options": map[string]any{"include_usage": true},
		"messages": []map[string]any{
			{"role": "system", "content": "Answer from the context."},
			{"role": "user", "content": user},
		},
	}
}

func TestStreamWireFormat(t *testing.T) {
	t.Parallel()
	cfg := Config{OutputTokens: 5, ITLMs: 1}
	s, ts := startSim(t, cfg)
	resp := post(t, context.Background(), ts.URL, "", chatBody(true, "why is prefill quadratic"))
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := readStream(t, resp.Body)
	// role, 5 contents, finish, usage, [DONE]
	if len(evs) != 9 {
		t.Fatalf("got %d events, want 9: %+v", len(evs), evs)
	}
	if evs[0].c.Choices[0].Delta.Role != "assistant" {
		t.Errorf("first chunk %s is not the role chunk", evs[0].raw)
	}
	var text strings.Builder
	for i, ev := range evs[1:6] {
		ch := ev.c.Choices[0]
		if ch.Delta.Content == nil || *ch.Delta.Content == "" || ch.FinishReason != nil {
			t.Fatalf("content chunk %d is %s", i, ev.raw)
		}
		text.WriteString(*ch.Delta.Content)
		if ev.c.Object != "chat.completion.chunk" || ev.c.ID != evs[0].c.ID || ev.c.Model != "m" {
			t.Errorf("chunk %d header: %s", i, ev.raw)
		}
	}
	for _, w := range strings.Fields(text.String()) {
		if !strings.Contains("why is prefill quadratic", w) {
			t.Errorf("word %q is not drawn from the last user message", w)
		}
	}
	if fr := evs[6].c.Choices[0].FinishReason; fr == nil || *fr != "stop" {
		t.Errorf("final chunk %s, want finish_reason stop", evs[6].raw)
	}
	u := evs[7].c.Usage
	counter, err := tokens.New("")
	if err != nil {
		t.Fatal(err)
	}
	// ChatML: 5 tokens around each message (<|im_start|>, role, \n,
	// <|im_end|>, \n) and 3 for the generation prompt
	wantPrompt := counter.Count("Answer from the context.") + counter.Count("why is prefill quadratic") + 2*5 + 3
	if u == nil || len(evs[7].c.Choices) != 0 || u.PromptTokens != wantPrompt || u.CompletionTokens != 5 || u.TotalTokens != wantPrompt+5 {
		t.Errorf("usage chunk %s, want prompt %d completion 5 and no choices", evs[7].raw, wantPrompt)
	}
	if !evs[8].done {
		t.Errorf("last event %s, want [DONE]", evs[8].raw)
	}

	// the same prompt streams the same text
	resp2 := post(t, context.Background(), ts.URL, "", chatBody(true, "why is prefill quadratic"))
	defer resp2.Body.Close()
	var text2 strings.Builder
	for _, ev := range readStream(t, resp2.Body) {
		if len(ev.c.Choices) > 0 && ev.c.Choices[0].Delta.Content != nil {
			text2.WriteString(*ev.c.Choices[0].Delta.Content)
		}
	}
	if text2.String() != text.String() {
		t.Errorf("same prompt streamed %q then %q", text.String(), text2.String())
	}
	if st := s.Stats(); st.Requests != 2 || st.Completed != 2 || st.TokensSent != 10 {
		t.Errorf("stats %+v, want 2 requests, 2 completed, 10 tokens", st)
	}
}

func TestMaxTokensCutsTheAnswer(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{OutputTokens: 50})
	body := chatBody(true, "a b c")
	body["max_tokens"] = 3
	resp := post(t, context.Background(), ts.URL, "", body)
	defer resp.Body.Close()
	evs := readStream(t, resp.Body)
	contents := 0
	var finish string
	for _, ev := range evs {
		if len(ev.c.Choices) == 0 {
			continue
		}
		ch := ev.c.Choices[0]
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			contents++
		}
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
	}
	if contents != 3 || finish != "length" {
		t.Errorf("%d content chunks, finish %q; want 3 and length", contents, finish)
	}
}

func TestNonStream(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{OutputTokens: 4, PrefillMs: 20})
	start := time.Now()
	resp := post(t, context.Background(), ts.URL, "", chatBody(false, "one two three"))
	defer resp.Body.Close()
	var c openaiwire.Chunk
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond {
		t.Errorf("answered after %v, before the 20 ms prefill", elapsed)
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].Message == nil || len(strings.Fields(*c.Choices[0].Message.Content)) != 4 ||
		c.Choices[0].Message.Role != "assistant" || c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "stop" || c.Usage == nil || c.Usage.CompletionTokens != 4 {
		t.Errorf("completion %+v", c)
	}
}

func TestFirstTokenWaitsForPrefill(t *testing.T) {
	t.Parallel()
	// 40 ms fixed + 2 ms per prompt token: the first token cannot come before
	// the modelled time, measured from before the request was sent.
	counter, err := tokens.New("")
	if err != nil {
		t.Fatal(err)
	}
	_, ts := startSim(t, Config{PrefillMs: 40, PrefillMsPerToken: 2, OutputTokens: 3, ITLMs: 10})
	body := chatBody(true, "how long is the first token delayed")
	prompt := counter.Count("Answer from the context.") + counter.Count("how long is the first token delayed")
	want := 40*time.Millisecond + time.Duration(prompt)*2*time.Millisecond

	start := time.Now()
	resp := post(t, context.Background(), ts.URL, "", body)
	defer resp.Body.Close()
	var first, last time.Time
	for _, ev := range readStream(t, resp.Body) {
		if len(ev.c.Choices) > 0 && ev.c.Choices[0].Delta.Content != nil && *ev.c.Choices[0].Delta.Content != "" {
			if first.IsZero() {
				first = ev.at
			}
			last = ev.at
		}
	}
	ttft := first.Sub(start)
	if ttft < want || ttft > want+time.Second {
		t.Errorf("first token after %v, want %v (prompt %d tokens)", ttft, want, prompt)
	}
	// The last of 3 tokens 10 ms apart leaves two steps after the first, so
	// no sooner than want + 20 ms after the request was sent. (last − first
	// is no bound: a reader starved after the first token stamps it late.)
	if done := last.Sub(start); done < want+20*time.Millisecond {
		t.Errorf("the last of 3 tokens 10 ms apart came %v after the request, want at least %v (prompt %d tokens)", done, want+20*time.Millisecond, prompt)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	s, ts := startSim(t, Config{APIKey: "sekret", Model: "m"})
	tests := []struct {
		name     string
		key      string
		body     any
		raw      string
		status   int
		code     string
		paramHas string
		msgHas   string
	}{
		{name: "no key", body: chatBody(true, "x"), status: 401, code: "invalid_api_key"},
		{name: "wrong key", key: "nope", body: chatBody(true, "x"), status: 401, code: "invalid_api_key"},
		{name: "other model", key: "sekret", body: map[string]any{"model": "gpt-9", "messages": []map[string]string{{"role": "user", "content": "x"}}}, status: 404, code: "model_not_found", paramHas: "model"},
		{name: "bad json", key: "sekret", raw: `{"model":`, status: 400, code: "invalid_request", msgHas: "not valid JSON"},
		{name: "wrong type", key: "sekret", raw: `{"model":"m","max_tokens":"ten","messages":[{"role":"user","content":"x"}]}`, status: 400, code: "invalid_request", paramHas: "max_tokens"},
		{name: "no messages", key: "sekret", raw: `{"model":"m"}`, status: 400, code: "invalid_request", paramHas: "messages"},
		{name: "bad content", key: "sekret", raw: `{"model":"m","messages":[{"role":"user","content":7}]}`, status: 400, code: "invalid_request", paramHas: "content"},
		{name: "zero max_tokens", key: "sekret", raw: `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, status: 400, code: "invalid_request", paramHas: "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp *http.Response
			if tt.raw != "" {
				req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(tt.raw))
				req.Header.Set("Authorization", "Bearer "+tt.key)
				var err error
				if resp, err = http.DefaultClient.Do(req); err != nil {
					t.Fatal(err)
				}
			} else {
				resp = post(t, context.Background(), ts.URL, tt.key, tt.body)
			}
			defer resp.Body.Close()
			var body openaiwire.ErrorResponse
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("status %d, body not an OpenAI error: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tt.status || body.Error.Code == nil || *body.Error.Code != tt.code || body.Error.Message == "" {
				t.Fatalf("status %d, error %+v; want %d %s", resp.StatusCode, body.Error, tt.status, tt.code)
			}
			if tt.paramHas != "" && (body.Error.Param == nil || !strings.Contains(*body.Error.Param, tt.paramHas)) {
				t.Errorf("param %v, want it to name %q", body.Error.Param, tt.paramHas)
			}
			if !strings.Contains(body.Error.Message, tt.msgHas) {
				t.Errorf("message %q, want it to contain %q", body.Error.Message, tt.msgHas)
			}
		})
	}
	if st := s.Stats(); st.Rejected != int64(len(tests)) || st.Completed != 0 {
		t.Errorf("stats %+v, want %d rejected", st, len(tests))
	}
	// the right key and model work
	resp := post(t, context.Background(), ts.URL, "sekret", chatBody(false, "x"))
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("right key and model: status %d", resp.StatusCode)
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	_, ts := startSim(t, Config{Model: "qwen-sim"})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list openaiwire.ModelList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 1 || list.Data[0].ID != "qwen-sim" || list.Data[0].OwnedBy != OwnedBy || !strings.Contains(OwnedBy, "simulator") {
		t.Errorf("models %+v", list)
	}
}

func TestClientDisconnectIsObserved(t *testing.T) {
	t.Parallel()
	s, ts := startSim(t, Config{OutputTokens: 1000, ITLMs: 5})
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, ts.URL, "", chatBody(true, "stream for a long while"))
	br := bufio.NewReader(resp.Body)
	// read the role chunk and one content chunk, then hang up
	for n := 0; n < 2; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Cancelled == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("simulator never observed the disconnect: %+v", s.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := s.Stats()
	if st.Completed != 0 || st.TokensSent >= 1000 || st.Active != 0 {
		t.Errorf("stats after disconnect %+v", st)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{ITLMs: -1}); err == nil || !strings.Contains(err.Error(), "itl-ms") {
		t.Errorf("New with negative itl: %v", err)
	}
	if _, err := New(Config{Encoding: "nope"}); err == nil {
		t.Error("New with unknown encoding succeeded")
	}
}

// TestAppendJSONStringMatchesEncodingJSON checks the hand-written escaper
// against encoding/json on awkward text: both must decode to the same string.
func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	cases := []string{"", "plain", `quote " and \ backslash`, "tab\tnew\nline\rcr", "\x00\x01\x1f\x7f",
		"héllo wörld ✓ 日本", "bad \xff\xfe utf8", "line\u2028sep\u2029para", "<html>&amp;</html>", "\xe2\x82"}
	for _, c := range cases {
		got := jsonappend.AppendString(nil, c)
		var back, want string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q: appendJSONString wrote invalid JSON %s: %v", c, got, err)
		}
		ref, _ := json.Marshal(c)
		if err := json.Unmarshal(ref, &want); err != nil {
			t.Fatal(err)
		}
		if back != want {
			t.Errorf("%q: decodes to %q, encoding/json's to %q", c, back, want)
		}
	}
}
