package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime"
)

// The doubles below are deliberately tiny: these tests check the runner's
// own arithmetic and control flow. The real parts are exercised end to end
// in cmd/ragtime's tests.

type wordCounter struct{}

func (wordCounter) Count(s string) int { return len(strings.Fields(s)) }

type fixedEmbedder struct{ err error }

func (e fixedEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.err != nil {
		return nil, e.err
	}
	return [][]float32{{1, 0}}, nil
}

type listSearcher struct{ hits []Hit }

func (s listSearcher) Search(ctx context.Context, q []float32, k int, f Filter) ([]Hit, error) {
	return s.hits[:min(k, len(s.hits))], nil
}

type reverseReranker struct{}

func (reverseReranker) Rerank(ctx context.Context, q string, hits []Hit, n int) ([]Hit, error) {
	out := make([]Hit, 0, len(hits))
	for i := len(hits) - 1; i >= 0; i-- {
		s := float64(i)
		h := hits[i]
		h.RerankScore = &s
		out = append(out, h)
	}
	return out[:min(n, len(out))], nil
}

// scriptGenerator emits its deltas with a pause before the first.
type scriptGenerator struct {
	prefill time.Duration
	deltas  []Delta
	err     error
	got     GenerateRequest
	timing  bool // hand the timings over with the first delta
	// server are the server timings reported with the last chunk.
	server map[string]float64
	// started, when set, is sent to (without blocking) as a generation
	// starts; release, when set, is waited for before the first delta.
	started chan struct{}
	release chan struct{}
	// now is the generator's clock; nil means time.Now.
	now func() time.Time
}

func (g *scriptGenerator) Generate(ctx context.Context, req *GenerateRequest, emit func(Delta) error, out *Generation) error {
	gen, err := g.generate(ctx, *req, emit)
	*out = gen
	return err
}

func (g *scriptGenerator) generate(ctx context.Context, req GenerateRequest, emit func(Delta) error) (Generation, error) {
	now := g.now
	if now == nil {
		now = time.Now
	}
	g.got = req
	gen := Generation{Provider: "script", RequestStart: now()}
	gen.GotConn = now()
	gen.WroteRequest = now()
	select {
	case g.started <- struct{}{}:
	default:
	}
	if g.release != nil {
		<-g.release
	}
	time.Sleep(g.prefill)
	if g.err != nil {
		return gen, g.err
	}
	for _, d := range g.deltas {
		d.At = now()
		if gen.FirstToken.IsZero() {
			gen.FirstToken = d.At
			if g.timing {
				timing := gen
				d.Timing = &timing
			}
		}
		gen.LastToken = d.At
		gen.Chunks++
		if err := emit(d); err != nil {
			return gen, err
		}
	}
	gen.Usage = ragtime.Usage{PromptTokens: 42, CompletionTokens: len(g.deltas)}
	gen.ServerTimings = g.server
	return gen, nil
}

type event struct {
	kind string
	name string
	text string
}

// recStream remembers every event; failAt makes the n-th write fail.
type recStream struct {
	events []event
	done   *ragtime.Record
	fail   *ragtime.Error
	failAt int
}

func (s *recStream) add(e event) error {
	s.events = append(s.events, e)
	if s.failAt > 0 && len(s.events) >= s.failAt {
		return errors.New("broken pipe")
	}
	return nil
}
func (s *recStream) Meta(Meta) error             { return s.add(event{kind: "meta"}) }
func (s *recStream) Stage(sp StageSpan) error    { return s.add(event{kind: "stage", name: sp.Name}) }
func (s *recStream) Sources([]Source) error      { return s.add(event{kind: "sources"}) }
func (s *recStream) Delta(d Delta) error         { return s.add(event{kind: kindOf(d), text: d.Text}) }
func (s *recStream) Done(r ragtime.Record) error { s.done = &r; return s.add(event{kind: "done"}) }
func (s *recStream) Fail(e *ragtime.Error) error {
	s.fail = e
	return s.add(event{kind: "error", name: e.Code})
}
func kindOf(d Delta) string {
	if d.Reasoning {
		return "reasoning"
	}
	return "token"
}

// memRecorder keeps records in memory; Run calls Record from every
// goroutine that runs a query, so appends are guarded.
type memRecorder struct {
	mu   sync.Mutex
	recs []ragtime.Record
}

func (m *memRecorder) Record(r ragtime.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r)
}

// hits returns n hits best first, each of a document of its own (so that
// the default collapse by document keeps them all).
func hits(n int) []Hit {
	out := make([]Hit, n)
	for i := range out {
		id := string(rune('a' + i))
		out[i] = Hit{Chunk: Chunk{ID: id, DocID: "doc-" + id, Title: "T", Text: "some words here"}, Score: 1 - float64(i)/10}
	}
	return out
}

func newTestPipeline(t *testing.T, gen Generator, mod func(*Config)) (*Pipeline, *memRecorder) {
	t.Helper()
	rec := &memRecorder{}
	cfg := Config{Embedder: fixedEmbedder{}, Searcher: listSearcher{hits(10)}, Reranker: reverseReranker{},
		Generator: gen, Counter: wordCounter{}, Recorder: rec, StoreQuestion: true}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, rec
}

func request(t *testing.T, q string, topK, topN int) *Request {
	t.Helper()
	r := Request{Question: q, TopK: topK, RerankTopN: topN, MaxTokens: Unset}
	if err := r.Normalize(DefaultMaxQuestion); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestBeginStopsBeforeTheModel: Begin runs the query up to the sources
// and asks the model nothing; the answer it returns streams, records and
// ends the query on the goroutine that calls it, as Run does whole.
func TestBeginStopsBeforeTheModel(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "Hello "}, {Text: "world"}}, started: make(chan struct{}, 1)}
	p, recorder := newTestPipeline(t, gen, nil)
	out := &recStream{}
	answer := p.Begin(context.Background(), request(t, "What is TTFT?", 5, 2), out)
	select {
	case <-gen.started:
		t.Fatal("Begin asked the model")
	default:
	}
	if last := out.events[len(out.events)-1]; last.kind != "sources" || len(recorder.recs) != 0 {
		t.Fatalf("after Begin: last event %+v, %d records", last, len(recorder.recs))
	}
	rec := answer()
	if rec.Status != ragtime.StatusOK || out.done == nil || len(recorder.recs) != 1 || recorder.recs[0].QueryID != rec.QueryID {
		t.Fatalf("after answer: status %s, done %v, %d records", rec.Status, out.done != nil, len(recorder.recs))
	}
	var text string
	for _, e := range out.events {
		text += e.text
	}
	if text != "Hello world" {
		t.Errorf("answer %q", text)
	}
}

func TestRunEventsAndDerivedNumbers(t *testing.T) {
	gen := &scriptGenerator{prefill: 20 * time.Millisecond, deltas: []Delta{
		{Text: "thinking", Reasoning: true}, {Text: "Hello "}, {Text: "world"},
	}}
	p, recorder := newTestPipeline(t, gen, nil)
	out := &recStream{}
	rec := p.Run(context.Background(), request(t, "What is TTFT?", 5, 2), out)

	var kinds []string
	for _, e := range out.events {
		k := e.kind
		if e.kind == "stage" {
			k += ":" + e.name
		}
		kinds = append(kinds, k)
	}
	want := "meta stage:queue stage:embed stage:search stage:rerank stage:assemble sources reasoning token token stage:llm_connect stage:llm_prefill stage:llm_decode done"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if rec.Status != ragtime.StatusOK || out.done == nil || len(recorder.recs) != 1 {
		t.Fatalf("status %s, done %v, recorded %d", rec.Status, out.done != nil, len(recorder.recs))
	}
	if rec.TTFTMs == nil || rec.FirstTokenMs == nil || rec.OverheadMs == nil {
		t.Fatal("ttft, first token or overhead missing")
	}
	if *rec.FirstTokenMs > *rec.TTFTMs {
		t.Errorf("first token %v after first answer token %v", *rec.FirstTokenMs, *rec.TTFTMs)
	}
	if rec.ReasoningMs == nil || math.Abs(*rec.ReasoningMs-(*rec.TTFTMs-*rec.FirstTokenMs)) > 0.002 {
		t.Errorf("reasoning_ms %v, want ttft %v − first token %v", rec.ReasoningMs, *rec.TTFTMs, *rec.FirstTokenMs)
	}
	sum := rec.QueueMs + rec.RetrievalMs + rec.GenTTFTMs + *rec.OverheadMs + *rec.ReasoningMs
	if math.Abs(sum-*rec.TTFTMs) > 0.01 {
		t.Errorf("queue+retrieval+gen_ttft+overhead+reasoning = %v, ttft = %v", sum, *rec.TTFTMs)
	}
	if rec.LLMPrefillMs < 20 {
		t.Errorf("llm_prefill %v ms, generator paused 20 ms", rec.LLMPrefillMs)
	}
	if rec.PrefillShare == nil || *rec.PrefillShare <= 0 || *rec.PrefillShare > 1 {
		t.Errorf("prefill share %v", rec.PrefillShare)
	}
	if rec.E2EMs < *rec.TTFTMs {
		t.Errorf("e2e %v < ttft %v", rec.E2EMs, *rec.TTFTMs)
	}
	var prev float64
	for i, s := range rec.Stages {
		if s.Seq != i {
			t.Errorf("stage %s seq %d, want %d", s.Name, s.Seq, i)
		}
		if s.StartMs < prev-0.001 && s.Name != ragtime.StageLLMDecode {
			t.Errorf("stage %s starts at %v before the previous %v", s.Name, s.StartMs, prev)
		}
		prev = s.StartMs
	}
	// The prompt: system first, sources in reranked order, question last.
	if len(gen.got.Messages) != 2 || gen.got.Messages[0].Role != "system" {
		t.Fatalf("messages %+v", gen.got.Messages)
	}
	user := gen.got.Messages[1].Content
	if !strings.HasSuffix(user, "Question: What is TTFT?") || !strings.Contains(user, "[1] T") {
		t.Errorf("user message %q", user)
	}
	if len(gen.got.Sources) != 2 || gen.got.Sources[0].ChunkID != "e" || gen.got.Sources[0].Rank != 1 {
		t.Errorf("sources %+v", gen.got.Sources)
	}
	if rec.Usage.PromptTokens != 42 || rec.Question != "What is TTFT?" || len(rec.QuestionSHA256) != 64 {
		t.Errorf("usage %+v question %q sha %q", rec.Usage, rec.Question, rec.QuestionSHA256)
	}
}

func TestRerankOffAndContextBudget(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "x"}}}
	p, _ := newTestPipeline(t, gen, func(c *Config) { c.MaxContextTokens = 12 })
	rec := p.Run(context.Background(), request(t, "q", 5, 0), &recStream{})
	// Each source block counts 5 words ("[n] T" + 3 words): two fit in 12.
	if len(gen.got.Sources) != 2 || gen.got.Sources[0].ChunkID != "a" {
		t.Fatalf("sources %+v", gen.got.Sources)
	}
	asm := rec.Stages[4]
	if asm.Name != ragtime.StageAssemble || asm.Attrs["dropped"] != 3 || asm.Attrs["chunks"] != 2 {
		t.Errorf("assemble attrs %v", asm.Attrs)
	}
	if rr := rec.Stages[3].Attrs["reranker"]; rr != "off" {
		t.Errorf("rerank attrs %v", rec.Stages[3].Attrs)
	}
}

func TestLoneChunkTrimmedToBudget(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "x"}}}
	long := Hit{Chunk: Chunk{ID: "a", Title: "T", Text: strings.Repeat("word ", 50)}}
	p, _ := newTestPipeline(t, gen, func(c *Config) {
		c.MaxContextTokens = 10
		c.Searcher = listSearcher{[]Hit{long}}
	})
	p.Run(context.Background(), request(t, "q", 1, 0), &recStream{})
	if len(gen.got.Sources) != 1 || len(strings.Fields(gen.got.Sources[0].Text)) != 8 {
		t.Fatalf("sources %+v", gen.got.Sources)
	}
}

func TestGeneratorErrorIsReported(t *testing.T) {
	gen := &scriptGenerator{err: &ragtime.Error{Code: "llm_auth", Message: "401", Hint: "check RAGTIME_LLM_API_KEY", Status: 401}}
	p, recorder := newTestPipeline(t, gen, nil)
	out := &recStream{}
	rec := p.Run(context.Background(), request(t, "q", 3, 1), out)
	if rec.Status != ragtime.StatusError || rec.ErrorCode != "llm_auth" || rec.UpstreamStatus != 401 {
		t.Fatalf("record %+v", rec)
	}
	if out.fail == nil || out.fail.Stage != ragtime.StageLLMPrefill || out.done != nil {
		t.Fatalf("fail %+v done %v", out.fail, out.done)
	}
	if rec.TTFTMs != nil || len(recorder.recs) != 1 {
		t.Errorf("ttft %v recorded %d", rec.TTFTMs, len(recorder.recs))
	}
}

func TestEmbedErrorNamesStage(t *testing.T) {
	p, _ := newTestPipeline(t, &scriptGenerator{}, func(c *Config) { c.Embedder = fixedEmbedder{err: errors.New("boom")} })
	out := &recStream{}
	rec := p.Run(context.Background(), request(t, "q", 3, 1), out)
	if rec.Status != ragtime.StatusError || rec.ErrorCode != "embed_failed" || out.fail.Stage != ragtime.StageEmbed {
		t.Fatalf("record %+v fail %+v", rec, out.fail)
	}
}

type panickingGenerator struct{}

func (panickingGenerator) Generate(context.Context, *GenerateRequest, func(Delta) error, *Generation) error {
	panic("generator boom")
}

// TestPanicsReachTheCaller: the query runs on goroutines of its own; a
// panic on either (retrieval's, the answer's) is raised again on Run's
// caller, naming the value and the goroutine's stack, so that the API's
// Recover middleware catches it instead of the process dying.
func TestPanicsReachTheCaller(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"retrieval": func(c *Config) { c.Searcher = panickingSearcher{} },
		"answer":    func(c *Config) { c.Generator = panickingGenerator{} },
	} {
		t.Run(name, func(t *testing.T) {
			p, _ := newTestPipeline(t, &scriptGenerator{}, mod)
			defer func() {
				got := fmt.Sprint(recover())
				if !strings.Contains(got, " boom") || !strings.Contains(got, "goroutine") {
					t.Errorf("recovered %q, want the panic's value and its stack", got)
				}
			}()
			p.Run(context.Background(), request(t, "q", 3, 1), &recStream{})
			t.Error("Run returned instead of panicking")
		})
	}
}

type panickingSearcher struct{}

func (panickingSearcher) Search(context.Context, []float32, int, Filter) ([]Hit, error) {
	panic("searcher boom")
}

func TestClientGoneIsCancelled(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "a"}, {Text: "b"}, {Text: "c"}}}
	p, recorder := newTestPipeline(t, gen, nil)
	out := &recStream{failAt: 8} // meta, 5 stages, sources, first token
	rec := p.Run(context.Background(), request(t, "q", 3, 1), out)
	if rec.Status != ragtime.StatusCancelled || out.done != nil || out.fail != nil {
		t.Fatalf("status %s done %v fail %v", rec.Status, out.done, out.fail)
	}
	if len(recorder.recs) != 1 || recorder.recs[0].Status != ragtime.StatusCancelled {
		t.Fatalf("recorded %+v", recorder.recs)
	}
}

func TestHideReasoningStillTimesIt(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "hmm", Reasoning: true}, {Text: "answer"}}}
	p, _ := newTestPipeline(t, gen, func(c *Config) { c.HideReasoning = true })
	out := &recStream{}
	rec := p.Run(context.Background(), request(t, "q", 3, 1), out)
	for _, e := range out.events {
		if e.kind == "reasoning" {
			t.Fatal("a hidden reasoning delta was forwarded")
		}
	}
	if rec.Stages[len(rec.Stages)-1].Attrs["chunks"] != 2 {
		t.Errorf("decode attrs %v", rec.Stages[len(rec.Stages)-1].Attrs)
	}
	if rec.FirstTokenMs == nil || rec.TTFTMs == nil || *rec.FirstTokenMs > *rec.TTFTMs {
		t.Errorf("first_token_ms %v, ttft_ms %v: the hidden reasoning must still be timed, first", rec.FirstTokenMs, rec.TTFTMs)
	}
}

func TestStoreQuestionFalseKeepsOnlyHash(t *testing.T) {
	p, _ := newTestPipeline(t, &scriptGenerator{deltas: []Delta{{Text: "x"}}}, func(c *Config) { c.StoreQuestion = false })
	rec := p.Run(context.Background(), request(t, "secret question", 3, 1), &recStream{})
	if rec.Question != "" || rec.QuestionSHA256 == "" {
		t.Fatalf("question %q sha %q", rec.Question, rec.QuestionSHA256)
	}
}

func TestQueueStageIsTheCallersWait(t *testing.T) {
	t.Parallel()
	p, _ := newTestPipeline(t, &scriptGenerator{deltas: []Delta{{Text: "x"}}}, nil)
	req := request(t, "q", 3, 1)
	end := time.Now()
	req.Queue = &QueueWait{Start: end.Add(-40 * time.Millisecond), End: end, Attrs: map[string]any{"limit": 8}}
	rec := p.Run(context.Background(), req, &recStream{})
	q := rec.Stages[0]
	if q.Name != ragtime.StageQueue || q.StartMs != 0 || q.DurationMs != 40 || rec.QueueMs != 40 || q.Attrs["limit"] != 8 {
		t.Fatalf("queue stage %+v, queue_ms %v", q, rec.QueueMs)
	}
	// The clock started at the arrival: the waited time is inside TTFT.
	if rec.TTFTMs == nil || *rec.TTFTMs < 40 {
		t.Fatalf("ttft_ms %v does not include the 40 ms queue", rec.TTFTMs)
	}
}

// blockingGenerator waits for its context to end, as a real upstream call
// does during a long prefill.
type blockingGenerator struct{ started chan struct{} }

func (g blockingGenerator) Generate(ctx context.Context, req *GenerateRequest, emit func(Delta) error, out *Generation) error {
	gen, err := g.generate(ctx, *req, emit)
	*out = gen
	return err
}

func (g blockingGenerator) generate(ctx context.Context, _ GenerateRequest, _ func(Delta) error) (Generation, error) {
	close(g.started)
	<-ctx.Done()
	return Generation{RequestStart: time.Now(), GotConn: time.Now()}, &ragtime.Error{Code: "llm_cancelled", Message: "cancelled", Err: ctx.Err()}
}

func TestCancelCauseIsStoredAndToldWhenAsked(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cause *Cancel
		told  bool
	}{
		{ErrClientStalled, false},
		{ErrServerShutdown, true},
	} {
		t.Run(tt.cause.Code, func(t *testing.T) {
			t.Parallel()
			gen := blockingGenerator{started: make(chan struct{})}
			p, _ := newTestPipeline(t, gen, nil)
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() { <-gen.started; cancel(tt.cause) }()
			out := &recStream{}
			rec := p.Run(ctx, request(t, "q", 3, 1), out)
			if rec.Status != ragtime.StatusCancelled || rec.ErrorCode != tt.cause.Code {
				t.Fatalf("status %s code %s, want cancelled %s", rec.Status, rec.ErrorCode, tt.cause.Code)
			}
			if told := out.fail != nil && out.fail.Code == tt.cause.Code; told != tt.told {
				t.Fatalf("error event sent: %v (%+v), want %v", told, out.fail, tt.told)
			}
			if tt.told && out.fail.Stage != ragtime.StageLLMPrefill {
				t.Errorf("error event stage %q, want the stage that was cut", out.fail.Stage)
			}
		})
	}
}

func TestStalledWriteIsStoredAsClientStalled(t *testing.T) {
	t.Parallel()
	p, _ := newTestPipeline(t, &scriptGenerator{deltas: []Delta{{Text: "x"}, {Text: "y"}}}, nil)
	out := &stallStream{recStream: recStream{failAt: 3}}
	rec := p.Run(context.Background(), request(t, "q", 3, 1), out)
	if rec.Status != ragtime.StatusCancelled || rec.ErrorCode != ragtime.CodeClientStalled {
		t.Fatalf("status %s code %s", rec.Status, rec.ErrorCode)
	}
}

// stallStream fails like the SSE writer does when a write times out.
type stallStream struct{ recStream }

func (s *stallStream) Stage(sp StageSpan) error {
	if err := s.recStream.Stage(sp); err != nil {
		return fmt.Errorf("writing stage event: %w", ErrClientStalled)
	}
	return nil
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		code string
	}{
		{"ok defaults", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}, ""},
		{"empty question", Request{Question: "  ", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}, "question_required"},
		{"long question", Request{Question: strings.Repeat("é", 4001), TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}, "question_too_long"},
		{"top_k 0", Request{Question: "q", TopK: 0, RerankTopN: Unset, MaxTokens: Unset}, "top_k_out_of_range"},
		{"top_k 101", Request{Question: "q", TopK: 101, RerankTopN: Unset, MaxTokens: Unset}, "top_k_out_of_range"},
		{"top_n > top_k", Request{Question: "q", TopK: 2, RerankTopN: 3, MaxTokens: Unset}, "rerank_top_n_out_of_range"},
		{"top_n < 0", Request{Question: "q", TopK: 2, RerankTopN: -1, MaxTokens: Unset}, "rerank_top_n_out_of_range"},
		{"max_tokens 0", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: 0}, "max_tokens_out_of_range"},
		{"max_tokens 4097", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: 4097}, "max_tokens_out_of_range"},
		// PostgreSQL text cannot hold NUL: such a question would make the
		// recorder reject the whole query record, losing its timings.
		{"NUL in question", Request{Question: "what\x00is ttft", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}, "question_invalid"},
		{"tabs and newlines are fine", Request{Question: "what\tis\nttft\r\n?", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}, ""},
		{"control character in model", Request{Question: "q", Model: "gpt\x00x", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}, "model_invalid"},
		{"newline in model", Request{Question: "q", Model: "gpt\nx", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}, "model_invalid"},
		{"history ok", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset,
			History: []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: ""}}}, ""},
		{"history tool role", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset,
			History: []Message{{Role: "tool", Content: "x"}}}, "history_invalid"},
		{"history NUL", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset,
			History: []Message{{Role: "user", Content: "a\x00b"}}}, "history_invalid"},
		{"history too many", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset,
			History: make([]Message, MaxHistory+1)}, "history_too_long"},
		{"history too long", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset,
			History: []Message{{Role: "user", Content: strings.Repeat("x", MaxHistoryChars+1)}}}, "history_too_long"},
		{"temperature 2.5", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset, Temperature: ptr(2.5)}, "temperature_out_of_range"},
		{"temperature -1", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset, Temperature: ptr(-1.0)}, "temperature_out_of_range"},
		{"temperature 0", Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset, Temperature: ptr(0.0)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Normalize(DefaultMaxQuestion)
			var ve *ValidationError
			switch {
			case tt.code == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.code != "" && (!errors.As(err, &ve) || ve.Code != tt.code):
				t.Fatalf("error %v, want code %s", err, tt.code)
			}
		})
	}
	r := Request{Question: "q", TopK: 2, RerankTopN: Unset, MaxTokens: Unset}
	_ = r.Normalize(0)
	if r.RerankTopN != 2 || r.MaxTokens != DefaultMaxTokens {
		t.Errorf("defaults: %+v", r)
	}
}

func TestRequestBudgetAndSweepID(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "x"}}}
	p, recorder := newTestPipeline(t, gen, func(c *Config) { c.MaxContextTokens = 100 })
	req := request(t, "q", 5, 0)
	req.MaxContextTokens, req.SweepID = 12, "6f1c1a8e-0b0a-4a57-9a57-1d0f2a3b4c5d"
	if err := req.Normalize(DefaultMaxQuestion); err != nil {
		t.Fatal(err)
	}
	rec := p.Run(context.Background(), req, &recStream{})
	if len(gen.got.Sources) != 2 || rec.MaxContextTokens != 12 || rec.SweepID != req.SweepID || recorder.recs[0].SweepID != req.SweepID {
		t.Errorf("sources %d, budget %d, sweep %q", len(gen.got.Sources), rec.MaxContextTokens, rec.SweepID)
	}
	// Without an override the configured budget applies and is recorded.
	rec = p.Run(context.Background(), request(t, "q", 5, 0), &recStream{})
	if len(gen.got.Sources) != 5 || rec.MaxContextTokens != 100 || rec.SweepID != "" {
		t.Errorf("sources %d, budget %d, sweep %q", len(gen.got.Sources), rec.MaxContextTokens, rec.SweepID)
	}
	for _, bad := range []Request{
		{Question: "q", TopK: 1, MaxTokens: 1, MaxContextTokens: -1},
		{Question: "q", TopK: 1, MaxTokens: 1, SweepID: "sweep-1"},
	} {
		var ve *ValidationError
		if err := bad.Normalize(DefaultMaxQuestion); !errors.As(err, &ve) {
			t.Errorf("Normalize(%+v) = %v, want a ValidationError", bad, err)
		}
	}
}

// slowThinker reasons for a while before answering.
type slowThinker struct{ think time.Duration }

func (g slowThinker) Generate(ctx context.Context, req *GenerateRequest, emit func(Delta) error, out *Generation) error {
	gen, err := g.generate(ctx, *req, emit)
	*out = gen
	return err
}

func (g slowThinker) generate(ctx context.Context, req GenerateRequest, emit func(Delta) error) (Generation, error) {
	gen := Generation{RequestStart: time.Now()}
	gen.GotConn, gen.WroteRequest = gen.RequestStart, gen.RequestStart
	gen.FirstToken = time.Now()
	if err := emit(Delta{Text: "hmm", Reasoning: true, At: gen.FirstToken}); err != nil {
		return gen, err
	}
	time.Sleep(g.think)
	gen.LastToken = time.Now()
	gen.Chunks = 2
	return gen, emit(Delta{Text: "answer", At: gen.LastToken})
}

func TestReasoningIsNotOverhead(t *testing.T) {
	p, _ := newTestPipeline(t, slowThinker{think: 30 * time.Millisecond}, nil)
	rec := p.Run(context.Background(), request(t, "q", 3, 1), &recStream{})
	if rec.ReasoningMs == nil || *rec.ReasoningMs < 30 {
		t.Fatalf("reasoning_ms %v, the model thought 30 ms", rec.ReasoningMs)
	}
	if *rec.OverheadMs >= 30 {
		t.Errorf("overhead_ms %v holds the thinking time", *rec.OverheadMs)
	}
	sum := rec.QueueMs + rec.RetrievalMs + rec.GenTTFTMs + *rec.OverheadMs + *rec.ReasoningMs
	if math.Abs(sum-*rec.TTFTMs) > 0.01 {
		t.Errorf("parts add up to %v, ttft %v", sum, *rec.TTFTMs)
	}
}

// blockingEmbedder waits for its context to end.
type blockingEmbedder struct{}

func (blockingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestDeadlineIsATimeoutNotACancellation(t *testing.T) {
	p, _ := newTestPipeline(t, &scriptGenerator{}, func(c *Config) { c.Embedder = blockingEmbedder{} })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	out := &recStream{}
	rec := p.Run(ctx, request(t, "q", 3, 1), out)
	if rec.Status != ragtime.StatusError || rec.ErrorCode != "embed_timeout" || out.fail == nil {
		t.Fatalf("status %s code %s fail %+v, want an embed_timeout error", rec.Status, rec.ErrorCode, out.fail)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	rec = p.Run(ctx, request(t, "q", 3, 1), &recStream{})
	if rec.Status != ragtime.StatusCancelled {
		t.Fatalf("a cancelled context gave status %s", rec.Status)
	}
}

func TestGenerationStagesGoOutWithTheFirstToken(t *testing.T) {
	gen := &scriptGenerator{timing: true, deltas: []Delta{{Text: "hmm", Reasoning: true}, {Text: "a"}, {Text: "b"}}}
	p, _ := newTestPipeline(t, gen, nil)
	out := &recStream{}
	rec := p.Run(context.Background(), request(t, "q", 3, 1), out)
	var kinds []string
	for _, e := range out.events[6:] { // after meta and the five retrieval stages
		k := e.kind
		if e.kind == "stage" {
			k += ":" + e.name
		}
		kinds = append(kinds, k)
	}
	want := "sources reasoning stage:llm_connect stage:llm_prefill token token stage:llm_decode done"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if n := len(rec.Stages); n != 8 || rec.Stages[6].Name != ragtime.StageLLMPrefill || rec.Stages[7].Name != ragtime.StageLLMDecode {
		t.Fatalf("stages %+v", rec.Stages)
	}
	sum := rec.QueueMs + rec.RetrievalMs + rec.GenTTFTMs + *rec.OverheadMs + *rec.ReasoningMs
	if math.Abs(sum-*rec.TTFTMs) > 0.01 {
		t.Errorf("parts add up to %v, ttft %v", sum, *rec.TTFTMs)
	}
}

// orderStream notes, at done or error, how many records the recorder held.
type orderStream struct {
	recStream
	rec           *memRecorder
	recordedAtEnd int
}

func (s *orderStream) Done(r ragtime.Record) error {
	s.rec.mu.Lock()
	s.recordedAtEnd = len(s.rec.recs)
	s.rec.mu.Unlock()
	return s.recStream.Done(r)
}

func (s *orderStream) Fail(e *ragtime.Error) error {
	s.rec.mu.Lock()
	s.recordedAtEnd = len(s.rec.recs)
	s.rec.mu.Unlock()
	return s.recStream.Fail(e)
}

// TestRecordedBeforeDone: the record reaches the Recorder before done (or
// error) is written, so a client that saw done can count on it being at
// least queued even if the process dies right after.
func TestRecordedBeforeDone(t *testing.T) {
	t.Parallel()
	for name, gen := range map[string]*scriptGenerator{
		"done":  {deltas: []Delta{{Text: "x"}}},
		"error": {err: &ragtime.Error{Code: "llm_unavailable", Message: "down"}},
	} {
		p, recorder := newTestPipeline(t, gen, nil)
		out := &orderStream{rec: recorder}
		p.Run(context.Background(), request(t, "What is TTFT?", 5, 2), out)
		if out.recordedAtEnd != 1 {
			t.Errorf("%s: the recorder held %d records when %s was written, want 1", name, out.recordedAtEnd, name)
		}
	}
}

func TestNearestRank(t *testing.T) {
	t.Parallel()
	twenty := make([]float64, 20)
	for i := range twenty {
		twenty[i] = float64(i + 1)
	}
	tests := []struct {
		sorted []float64
		p      float64
		want   float64
	}{
		{nil, 0.5, 0},
		{[]float64{7}, 0.99, 7},
		{[]float64{1, 2, 3, 4}, 0.5, 2},
		{[]float64{1, 2, 3, 4}, 0.51, 3},
		{twenty, 0.95, 19}, // 0.95 × 20 rounds to a hair above 19 in floats
		{twenty, 1, 20},
		{twenty, 0.01, 1},
	}
	for _, tt := range tests {
		if got := ragtime.NearestRank(tt.sorted, tt.p); got != tt.want {
			t.Errorf("NearestRank(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
		}
	}
}

// TestArrivalStartsTheClock: with the request's arrival in the context, the
// clock starts there, the accept stage covers the wait before Run, and the
// figures still add up to TTFT.
func TestArrivalStartsTheClock(t *testing.T) {
	t.Parallel()
	gen := &scriptGenerator{prefill: 5 * time.Millisecond, deltas: []Delta{{Text: "Hello"}}}
	p, _ := newTestPipeline(t, gen, nil)
	out := &recStream{}
	ctx := WithArrival(context.Background(), time.Now().Add(-30*time.Millisecond))
	rec := p.Run(ctx, request(t, "What is TTFT?", 5, 2), out)
	if rec.Status != ragtime.StatusOK || len(rec.Stages) == 0 {
		t.Fatalf("status %s, stages %v", rec.Status, rec.Stages)
	}
	if s := rec.Stages[0]; s.Name != ragtime.StageAccept || s.Seq != 0 || s.StartMs != 0 || s.DurationMs < 30 || rec.AcceptMs != s.DurationMs {
		t.Errorf("first stage %+v, accept_ms %v: want accept from 0, at least 30 ms", s, rec.AcceptMs)
	}
	if rec.Stages[1].Name != ragtime.StageQueue || rec.Stages[1].StartMs < rec.AcceptMs-0.001 {
		t.Errorf("queue %+v starts before the pipeline did", rec.Stages[1])
	}
	sum := rec.AcceptMs + rec.QueueMs + rec.RetrievalMs + rec.GenTTFTMs + *rec.OverheadMs + *rec.ReasoningMs
	if math.Abs(sum-*rec.TTFTMs) > 0.01 || *rec.TTFTMs < 30 {
		t.Errorf("accept+queue+retrieval+gen_ttft+overhead+reasoning = %v, ttft = %v", sum, *rec.TTFTMs)
	}
	if *rec.OverheadMs > 5 {
		t.Errorf("overhead_ms %v holds the accept time", *rec.OverheadMs)
	}
	// A future arrival (another clock) is ignored, not a negative stage.
	rec = p.Run(WithArrival(context.Background(), time.Now().Add(time.Hour)), request(t, "What is TTFT?", 5, 2), &recStream{})
	if rec.Stages[0].Name == ragtime.StageAccept || rec.AcceptMs != 0 {
		t.Errorf("a future arrival made stage %+v", rec.Stages[0])
	}
}

// TestPromptNonceFollowsTheSystemPrompt: the nonce is the first thing after
// the system prompt, so two requests share the system prompt and nothing
// more; a bad nonce is refused naming the field.
func TestPromptNonceFollowsTheSystemPrompt(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "x"}}}
	p, _ := newTestPipeline(t, gen, nil)
	var users []string
	for _, nonce := range []string{"sweep 1 query 1", "sweep 1 query 2"} {
		req := request(t, "same question", 3, 0)
		req.PromptNonce = nonce
		if err := req.Normalize(DefaultMaxQuestion); err != nil {
			t.Fatal(err)
		}
		p.Run(context.Background(), req, &recStream{})
		if gen.got.Messages[0].Role != "system" || gen.got.Messages[0].Content != DefaultSystemPrompt {
			t.Fatalf("first message %+v, want the system prompt", gen.got.Messages[0])
		}
		users = append(users, gen.got.Messages[1].Content)
		if !strings.HasPrefix(gen.got.Messages[1].Content, "Request "+nonce+"\n\n") {
			t.Errorf("user message starts %.40q, want the nonce first", gen.got.Messages[1].Content)
		}
	}
	if strings.TrimPrefix(users[0], "Request sweep 1 query 1") != strings.TrimPrefix(users[1], "Request sweep 1 query 2") {
		t.Errorf("the nonce changed more than itself:\n%q\n%q", users[0], users[1])
	}
	for _, bad := range []string{strings.Repeat("n", MaxPromptNonce+1), "line\nbreak", "naïve"} {
		r := Request{Question: "q", TopK: 1, MaxTokens: 1, PromptNonce: bad}
		var ve *ValidationError
		if err := r.Normalize(DefaultMaxQuestion); !errors.As(err, &ve) || ve.Field != "prompt_nonce" {
			t.Errorf("nonce %q: %v, want a ValidationError naming prompt_nonce", bad, err)
		}
	}
}

// TestPrefillUnexplained: when the server reports its prefill, the rest of
// llm_prefill is its own figure; when it does not, the figure is nil.
func TestPrefillUnexplained(t *testing.T) {
	gen := &scriptGenerator{prefill: 15 * time.Millisecond, deltas: []Delta{{Text: "x"}}, server: map[string]float64{ragtime.ServerPrefillMs: 4.25}}
	p, _ := newTestPipeline(t, gen, nil)
	rec := p.Run(context.Background(), request(t, "q", 2, 0), &recStream{})
	if rec.ServerPrefillMs == nil || rec.PrefillUnexplainedMs == nil || *rec.PrefillUnexplainedMs != round3(rec.LLMPrefillMs-4.25) || *rec.PrefillUnexplainedMs < 10 {
		t.Errorf("llm_prefill %.3f, server prefill %v, unexplained %v; want llm_prefill − 4.25 (≥ 10)", rec.LLMPrefillMs, rec.ServerPrefillMs, rec.PrefillUnexplainedMs)
	}
	if d := rec.DoneEvent(); d.PrefillUnexplainedMs != rec.PrefillUnexplainedMs {
		t.Errorf("the done event lacks prefill_unexplained_ms")
	}
	gen.server = nil
	rec = p.Run(context.Background(), request(t, "q", 2, 0), &recStream{})
	if rec.PrefillUnexplainedMs != nil {
		t.Errorf("unexplained %v without a server prefill, want nil", *rec.PrefillUnexplainedMs)
	}
}

func ptr[T any](v T) *T { return &v }

// TestHistoryGoesBetweenSystemAndSources: a conversation's earlier
// messages reach the model after the system prompt and before the user
// message with the sources and the question, are counted in prompt_tokens,
// and play no part in retrieval (the question alone is embedded).
func TestHistoryGoesBetweenSystemAndSources(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "ok"}}}
	p, _ := newTestPipeline(t, gen, nil)
	plain := p.Run(context.Background(), request(t, "What is TTFT?", 5, 2), &recStream{})

	req := request(t, "What is TTFT?", 5, 2)
	req.History = []Message{{Role: "system", Content: "Answer briefly."}, {Role: "user", Content: "hello there"}, {Role: "assistant", Content: "hi"}}
	req.Temperature = ptr(0.2)
	rec := p.Run(context.Background(), req, &recStream{})
	msgs := gen.got.Messages
	if len(msgs) != 5 || msgs[0].Role != "system" || msgs[0].Content != DefaultSystemPrompt ||
		msgs[1] != req.History[0] || msgs[2] != req.History[1] || msgs[3] != req.History[2] ||
		msgs[4].Role != "user" || !strings.HasSuffix(msgs[4].Content, "Question: What is TTFT?") {
		t.Fatalf("messages %+v", msgs)
	}
	if gen.got.Temperature == nil || *gen.got.Temperature != 0.2 {
		t.Errorf("temperature %v, want 0.2", gen.got.Temperature)
	}
	// The assemble stage's count (the generator reports its own usage):
	// wordCounter's 2 + 2 + 1 words, and 3 framing tokens per message.
	counted := func(r *ragtime.Record) int {
		for _, s := range r.Stages {
			if s.Name == ragtime.StageAssemble {
				return s.Attrs["prompt_tokens"].(int)
			}
		}
		return -1
	}
	if want := counted(plain) + 5 + 3*3; counted(rec) != want {
		t.Errorf("prompt tokens %d with history, %d without; want %d", counted(rec), counted(plain), want)
	}
}

// flushStream is a recStream that holds every event but tokens, done and
// error until Flush, as the SSE writer does; sent lists what a client would
// have received so far.
type flushStream struct {
	recStream
	sent    []event
	flushes int
}

func (s *flushStream) Flush() error {
	s.flushes++
	s.sent = slices.Clone(s.events)
	return nil
}
func (s *flushStream) Delta(d Delta) error {
	err := s.recStream.Delta(d)
	if !d.More { // one marked More may be held, as eventLog does
		s.sent = slices.Clone(s.events)
	}
	return err
}

// heldWhenCalled notes, on each call of a remote stage or the model, how
// many events the stream had that the client had not received.
type heldWhenCalled struct {
	out  *flushStream
	held []int
}

func (h *heldWhenCalled) note() { h.held = append(h.held, len(h.out.events)-len(h.out.sent)) }

type notingEmbedder struct{ h *heldWhenCalled }

func (e notingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.h.note()
	return fixedEmbedder{}.Embed(ctx, texts)
}

type notingSearcher struct{ h *heldWhenCalled }

func (s notingSearcher) Search(ctx context.Context, q []float32, k int, f Filter) ([]Hit, error) {
	s.h.note()
	return listSearcher{hits(10)}.Search(ctx, q, k, f)
}

type notingReranker struct{ h *heldWhenCalled }

func (r notingReranker) Rerank(ctx context.Context, q string, hs []Hit, n int) ([]Hit, error) {
	r.h.note()
	return reverseReranker{}.Rerank(ctx, q, hs, n)
}

type notingGenerator struct {
	h *heldWhenCalled
	scriptGenerator
}

func (g *notingGenerator) Generate(ctx context.Context, req *GenerateRequest, emit func(Delta) error, out *Generation) error {
	gen, err := g.generate(ctx, *req, emit)
	*out = gen
	return err
}

func (g *notingGenerator) generate(ctx context.Context, req GenerateRequest, emit func(Delta) error) (Generation, error) {
	g.h.note()
	return g.scriptGenerator.generate(ctx, req, func(d Delta) error {
		err := emit(d)
		g.h.note() // after the first token: its llm_connect and llm_prefill too
		return err
	})
}

// TestFlushedBeforeEveryWait: a Stream that holds events has them all sent
// before the embedder, the search, the reranker and the model are called
// and after each token, and in fewer writes than events.
func TestFlushedBeforeEveryWait(t *testing.T) {
	t.Parallel()
	out := &flushStream{}
	h := &heldWhenCalled{out: out}
	gen := &notingGenerator{h: h, scriptGenerator: scriptGenerator{timing: true, deltas: []Delta{{Text: "a"}, {Text: "b"}}}}
	p, _ := newTestPipeline(t, gen, func(c *Config) {
		c.Embedder, c.Searcher, c.Reranker = notingEmbedder{h}, notingSearcher{h}, notingReranker{h}
	})
	rec := p.Run(context.Background(), request(t, "What is TTFT?", 5, 2), out)
	if rec.Status != ragtime.StatusOK {
		t.Fatalf("status %s: %s", rec.Status, rec.ErrorMessage)
	}
	if want := []int{0, 0, 0, 0, 0, 0}; !slices.Equal(h.held, want) {
		t.Errorf("events held from the client at embed, search, rerank, generate, token 1, token 2: %v, want %v", h.held, want)
	}
	if out.flushes >= len(out.events)-3 {
		t.Errorf("%d flushes for %d events", out.flushes, len(out.events))
	}
}

// TestDeltasMarkedMore: a delta the generator marks More (the next is in
// hand) may be held by the stream, except the first and the first answer
// delta, which TTFT times; a hidden reasoning delta that ends such a run
// has the held ones flushed, so none waits on the model.
func TestDeltasMarkedMore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		hide   bool
		deltas []Delta
		want   []bool // More as the stream saw it, per forwarded delta
		held   int    // events not yet sent when the generation returned
	}{
		{"first and first answer delta sent at once", false,
			[]Delta{{Text: "r", Reasoning: true, More: true}, {Text: "a", More: true}, {Text: "b", More: true}, {Text: "c"}},
			[]bool{false, false, true, false}, 0},
		{"hidden reasoning ends a run", true,
			[]Delta{{Text: "a"}, {Text: "b", More: true}, {Text: "r", Reasoning: true}},
			[]bool{false, true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := &moreStream{}
			gen := &scriptGenerator{deltas: tc.deltas}
			p, _ := newTestPipeline(t, gen, func(c *Config) { c.HideReasoning = tc.hide })
			rec := p.Run(context.Background(), request(t, "What is TTFT?", 5, 2), heldAtGenerationEnd{out, &out.heldAtEnd})
			if rec.Status != ragtime.StatusOK {
				t.Fatalf("status %s: %s", rec.Status, rec.ErrorMessage)
			}
			if !slices.Equal(out.more, tc.want) || out.heldAtEnd != tc.held {
				t.Errorf("More per delta %v, %d held after the last delta; want %v, %d", out.more, out.heldAtEnd, tc.want, tc.held)
			}
		})
	}
}

// moreStream notes the More of each delta and how many deltas it holds.
type moreStream struct {
	flushStream
	more      []bool
	holding   int
	heldAtEnd int
}

func (s *moreStream) Delta(d Delta) error {
	s.more = append(s.more, d.More)
	if d.More {
		s.holding++
	} else {
		s.holding = 0
	}
	return s.flushStream.Delta(d)
}

func (s *moreStream) Flush() error {
	s.holding = 0
	return s.flushStream.Flush()
}

// heldAtGenerationEnd notes, when a stage event after the deltas arrives
// (llm_decode), how many deltas the stream was still holding.
type heldAtGenerationEnd struct {
	*moreStream
	at *int
}

func (h heldAtGenerationEnd) Stage(sp StageSpan) error {
	if sp.Name == ragtime.StageLLMDecode {
		*h.at = h.holding
	}
	return h.moreStream.Stage(sp)
}

// writeStream groups the events a client receives by the write that
// carries them, as the SSE writer does: events are held until a Flush,
// or a Delta not marked More, sends them with everything held before.
type writeStream struct {
	recStream
	held   []string
	writes [][]string
}

func (s *writeStream) hold(name string) { s.held = append(s.held, name) }
func (s *writeStream) Flush() error {
	if len(s.held) > 0 {
		s.writes = append(s.writes, s.held)
		s.held = nil
	}
	return nil
}
func (s *writeStream) Meta(m Meta) error          { s.hold("meta"); return s.recStream.Meta(m) }
func (s *writeStream) Stage(sp StageSpan) error   { s.hold(sp.Name); return s.recStream.Stage(sp) }
func (s *writeStream) Sources(src []Source) error { s.hold("sources"); return s.recStream.Sources(src) }
func (s *writeStream) Delta(d Delta) error {
	s.hold(kindOf(d) + " " + d.Text)
	if !d.More {
		_ = s.Flush()
	}
	return s.recStream.Delta(d)
}
func (s *writeStream) Done(r ragtime.Record) error {
	s.hold("done")
	_ = s.Flush()
	return s.recStream.Done(r)
}

// inProcessSearcher is listSearcher declaring that its search waits on
// nothing outside the process, as the embedded index does.
type inProcessSearcher struct{ listSearcher }

func (inProcessSearcher) SearchesInProcess() bool { return true }

// TestWritesOfAnAsk: the events of an ask reach the client in as few
// writes as the waits allow. The first token goes out at once with the
// llm_connect and llm_prefill its timings give, after it in the same
// write; before an in-process search nothing is flushed, so the embed
// stage goes out with the stages after it, while before a search that may
// wait outside the process (any other Searcher) it is flushed.
func TestWritesOfAnAsk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		searcher Searcher
		want     [][]string
	}{
		{"in-process search", inProcessSearcher{listSearcher{hits(10)}}, [][]string{
			{"meta", ragtime.StageQueue},
			{ragtime.StageEmbed, ragtime.StageSearch, ragtime.StageRerank, ragtime.StageAssemble, "sources"},
			{"token a", ragtime.StageLLMConnect, ragtime.StageLLMPrefill},
			{"token b"},
			{ragtime.StageLLMDecode, "done"},
		}},
		{"search of unknown reach", listSearcher{hits(10)}, [][]string{
			{"meta", ragtime.StageQueue},
			{ragtime.StageEmbed},
			{ragtime.StageSearch, ragtime.StageRerank, ragtime.StageAssemble, "sources"},
			{"token a", ragtime.StageLLMConnect, ragtime.StageLLMPrefill},
			{"token b"},
			{ragtime.StageLLMDecode, "done"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := &writeStream{}
			gen := &scriptGenerator{timing: true, deltas: []Delta{{Text: "a"}, {Text: "b"}}}
			p, _ := newTestPipeline(t, gen, func(c *Config) { c.Searcher, c.Reranker = tc.searcher, nil })
			rec := p.Run(context.Background(), request(t, "What is TTFT?", 5, 2), out)
			if rec.Status != ragtime.StatusOK {
				t.Fatalf("status %s: %s", rec.Status, rec.ErrorMessage)
			}
			if !slices.EqualFunc(out.writes, tc.want, slices.Equal) {
				t.Errorf("writes\n%q, want\n%q", out.writes, tc.want)
			}
		})
	}
}

// TestDeltaGapsStats: the inter-token figures from the gaps kept as
// uint32s are those of the arrivals' differences, also past a gap a uint32
// does not hold (or a clock that went back), and zeros below two deltas.
func TestDeltaGapsStats(t *testing.T) {
	t.Parallel()
	ms := func(f float64) time.Duration { return time.Duration(f * 1e6) }
	for _, arrivals := range [][]time.Duration{
		nil,
		{ms(5)},
		{ms(5), ms(6.0004)},
		{ms(5), ms(25.5), ms(30), ms(31.25), ms(80), ms(80.0015), ms(95)},
		{ms(5), ms(25.5), ms(30), 6 * time.Second, 6*time.Second + ms(2), 6*time.Second + ms(3.5)},
		{ms(5), ms(25.5), ms(20), ms(31)},
	} {
		var g deltaGaps
		for _, at := range arrivals {
			g.add(at, 4)
		}
		var want [3]float64
		if len(arrivals) >= 2 {
			gaps := make([]time.Duration, len(arrivals)-1)
			for i := range gaps {
				gaps[i] = arrivals[i+1] - arrivals[i]
			}
			slices.Sort(gaps)
			want = [3]float64{roundMs(gaps[ragtime.NearestRankIndex(len(gaps), 0.50)]), roundMs(gaps[ragtime.NearestRankIndex(len(gaps), 0.95)]), roundMs(gaps[len(gaps)-1])}
		}
		p50, p95, pmax := g.stats()
		if got := [3]float64{p50, p95, pmax}; got != want {
			t.Errorf("arrivals %v: p50, p95, max %v, want %v", arrivals, got, want)
		}
	}
}

// TestStopAndSeedReachTheModel: a request's stop sequences and seed are in
// what the generator is asked.
func TestStopAndSeedReachTheModel(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "x"}}}
	p, _ := newTestPipeline(t, gen, nil)
	req := request(t, "q", 5, 0)
	seed := int64(9)
	req.Stop, req.Seed = []string{"END"}, &seed
	p.Run(context.Background(), req, &recStream{})
	if !slices.Equal(gen.got.Stop, []string{"END"}) || gen.got.Seed == nil || *gen.got.Seed != 9 {
		t.Errorf("the model was asked with stop %q seed %v", gen.got.Stop, gen.got.Seed)
	}
}

// slowWriteStream is a recStream whose first delta's write takes wait (a
// write the kernel is slow to take, or a goroutine descheduled after it),
// noting when the delta was handed to it.
type slowWriteStream struct {
	recStream
	wait   time.Duration
	handed time.Time
}

func (s *slowWriteStream) Delta(d Delta) error {
	if s.handed.IsZero() {
		s.handed = time.Now()
		time.Sleep(s.wait)
	}
	return s.recStream.Delta(d)
}

// TestTTFTIsWhenTheTokenIsHandedToTheStream: ttft_ms ends when the first
// token is handed to the stream that writes it to the client, not when
// that write returned: a client has the token as soon as the write puts it
// on the socket, and whatever the writer waits after that (here 50 ms) it
// did not wait.
func TestTTFTIsWhenTheTokenIsHandedToTheStream(t *testing.T) {
	gen := &scriptGenerator{deltas: []Delta{{Text: "Hello "}, {Text: "world"}}}
	p, _ := newTestPipeline(t, gen, nil)
	out := &slowWriteStream{wait: 50 * time.Millisecond}
	t0 := time.Now()
	rec := p.Run(WithArrival(context.Background(), t0), request(t, "What is TTFT?", 5, 0), out)
	if rec.TTFTMs == nil || rec.FirstTokenMs == nil {
		t.Fatalf("no TTFT: %+v", rec.Figures)
	}
	handed := float64(out.handed.Sub(t0).Microseconds()) / 1e3
	// ttft_ms is rounded to the microsecond, handed truncated to it.
	if *rec.TTFTMs > handed+0.001 || *rec.FirstTokenMs != *rec.TTFTMs {
		t.Errorf("ttft_ms %v, first_token_ms %v; the token was handed to the stream at %v ms (its write took 50 ms more)",
			*rec.TTFTMs, *rec.FirstTokenMs, handed)
	}
}
