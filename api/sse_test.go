package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/pipeline"
	"ragtime/pipeline/pipelinetest"
)

// countingWriter is a ResponseWriter that keeps nothing and counts the
// flushes and write-deadline changes it is asked for.
type countingWriter struct {
	header    http.Header
	bytes     int
	flushes   int
	deadlines []time.Time
}

func (w *countingWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}
func (w *countingWriter) Write(p []byte) (int, error) { w.bytes += len(p); return len(p), nil }
func (w *countingWriter) WriteHeader(int)             {}
func (w *countingWriter) FlushError() error           { w.flushes++; return nil }
func (w *countingWriter) SetWriteDeadline(d time.Time) error {
	w.deadlines = append(w.deadlines, d)
	return nil
}

// attachedLog is a running query's stream attached to w, past its meta event.
func attachedLog(tb testing.TB, w http.ResponseWriter, timeout time.Duration) *eventLog {
	h := newStreamHub(StreamOptions{WriteTimeout: timeout})
	l := &eventLog{hub: h, cancel: func(error) {}}
	l.mu.Lock()
	l.attachLocked(echo.NewResponse(w, nil))
	l.mu.Unlock()
	if err := l.Meta(pipeline.Meta{QueryID: "7a3ea7a3-3678-4666-9ab1-b1ae4fbf55b7"}); err != nil {
		tb.Fatal(err)
	}
	return l
}

// TestWriteDeadlineIsNotMovedPerEvent: the write deadline is set on the
// stream's first write, at least WriteTimeout ahead, and left alone while
// more than WriteTimeout of it remains: one timer update per stream rather
// than one per token; every event is still flushed.
func TestWriteDeadlineIsNotMovedPerEvent(t *testing.T) {
	t.Parallel()
	w := &countingWriter{}
	const timeout = time.Hour // the test cannot spend half of it
	start := time.Now()
	l := attachedLog(t, w, timeout)
	for range 100 {
		if err := l.Delta(pipeline.Delta{Text: "tok "}); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.deadlines) != 1 {
		t.Fatalf("%d deadline changes for 101 events, want 1", len(w.deadlines))
	}
	if d := w.deadlines[0]; d.Before(start.Add(timeout)) || d.After(time.Now().Add(timeout*3/2)) {
		t.Errorf("deadline %v ahead, want between %v and %v", d.Sub(start), timeout, timeout*3/2)
	}
	if w.flushes != 100 {
		t.Errorf("%d flushes for 100 tokens after the meta event", w.flushes)
	}
	// A deadline with less than WriteTimeout left is moved before the write.
	l.sink.conn.deadline = time.Now().Add(timeout / 2)
	if err := l.Delta(pipeline.Delta{Text: "tok "}); err != nil {
		t.Fatal(err)
	}
	if len(w.deadlines) != 2 || w.deadlines[1].Before(time.Now().Add(timeout)) {
		t.Errorf("deadlines %v: the nearly spent one was not moved a WriteTimeout ahead", w.deadlines)
	}
}

// TestEventsHeldUntilFlush: meta, stage and sources events are written but
// not flushed until Flush (or a token, or the end), so a burst of them is
// one network write; tokens, done and error are flushed at once.
func TestEventsHeldUntilFlush(t *testing.T) {
	t.Parallel()
	w := &countingWriter{}
	l := attachedLog(t, w, time.Second)
	_ = l.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: ragtime.StageAccept}})
	_ = l.Sources(nil)
	if w.flushes != 0 || !l.sink.conn.pending {
		t.Fatalf("%d flushes after meta, a stage and the sources; want them held", w.flushes)
	}
	if err := l.Flush(); err != nil || w.flushes != 1 || l.sink.conn.pending {
		t.Fatalf("Flush: %v, %d flushes", err, w.flushes)
	}
	if err := l.Flush(); err != nil || w.flushes != 1 {
		t.Errorf("a Flush with nothing held flushed again (%d)", w.flushes)
	}
	_ = l.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: ragtime.StageEmbed}})
	_ = l.Delta(pipeline.Delta{Text: "a"})
	if w.flushes != 2 || l.sink.conn.pending {
		t.Errorf("a token after a held stage: %d flushes, pending %v; want both sent by the token's flush", w.flushes, l.sink.conn.pending)
	}
	_ = l.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: ragtime.StageLLMDecode}})
	_ = l.Done(ragtime.Record{})
	if w.flushes != 3 {
		t.Errorf("done: %d flushes, want 3", w.flushes)
	}
	_ = l.Stage(pipeline.StageSpan{Span: ragtime.Span{Name: "late"}})
	l.end()
	if w.flushes != 4 {
		t.Errorf("end with an event held: %d flushes, want it flushed", w.flushes)
	}
}

// TestTokensMarkedMoreAreHeld: a token whose delta says another is already
// in hand is held, and the next token without More sends both in one flush.
func TestTokensMarkedMoreAreHeld(t *testing.T) {
	t.Parallel()
	w := &countingWriter{}
	l := attachedLog(t, w, time.Second)
	_ = l.Delta(pipeline.Delta{Text: "a", More: true})
	_ = l.Delta(pipeline.Delta{Text: "b", Reasoning: true, More: true})
	if w.flushes != 0 || !l.sink.conn.pending {
		t.Fatalf("%d flushes after two tokens marked More; want them held", w.flushes)
	}
	_ = l.Delta(pipeline.Delta{Text: "c"})
	if w.flushes != 1 || l.sink.conn.pending {
		t.Errorf("a token without More: %d flushes, pending %v; want one flush sending all three", w.flushes, l.sink.conn.pending)
	}
}

// TestTokenEventIsFramedAsJSON: a token's event is the JSON encoding/json
// writes for the delta (HTML escaping off), with the stream's id and name.
func TestTokenEventIsFramedAsJSON(t *testing.T) {
	t.Parallel()
	l := attachedLog(t, &countingWriter{}, time.Second)
	for _, d := range []pipeline.Delta{{Text: "a <b> & \"c\"\n"}, {Text: "thinking", Reasoning: true}} {
		if err := l.Delta(d); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(d); err != nil {
			t.Fatal(err)
		}
		name := map[bool]string{false: EventToken, true: EventReasoning}[d.Reasoning]
		// As a resume frames it again from what was kept.
		seq := l.seq - 1
		l.scratch.Reset()
		if err := frameKept(l, len(l.kept)-1); err != nil {
			t.Fatal(err)
		}
		if got, w := l.scratch.String(), fmt.Sprintf("id: %s:%d\nevent: %s\ndata: %s\n", l.id, seq, name, want.String()); got != w {
			t.Errorf("event\n%q, want\n%q", got, w)
		}
	}
}

// TestStageEventIsFramedAsJSON: a stage event carries what encoding/json
// writes for the span (HTML escaping off), framed by hand or, for
// attributes AppendJSON does not write, by encoding/json.
func TestStageEventIsFramedAsJSON(t *testing.T) {
	t.Parallel()
	l := attachedLog(t, &countingWriter{}, time.Second)
	for _, sp := range []ragtime.Span{
		{Name: "embed", Seq: 2, StartMs: 0.211, DurationMs: 5.9, Attrs: map[string]any{"embedder": "openai:<m>", "dim": 512, "reused": true}},
		{Name: "search", Seq: 3, Attrs: map[string]any{"ids": []string{"a<b"}, "k": 4}},
	} {
		if err := l.Stage(pipeline.StageSpan{Span: sp}); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(sp); err != nil {
			t.Fatal(err)
		}
		seq := l.seq - 1
		l.scratch.Reset()
		if err := frameKept(l, len(l.kept)-1); err != nil {
			t.Fatal(err)
		}
		if got, w := l.scratch.String(), fmt.Sprintf("id: %s:%d\nevent: stage\ndata: %s\n", l.id, seq, want.String()); got != w {
			t.Errorf("event\n%q, want\n%q", got, w)
		}
	}
}

// TestDoneEventIsFramedAsJSON: the done event carries what encoding/json
// writes for the record's DoneEvent, framed by hand or, with a stage
// AppendJSON does not frame, by encoding/json.
func TestDoneEventIsFramedAsJSON(t *testing.T) {
	t.Parallel()
	ttft := 12.5
	for _, stages := range [][]ragtime.Span{nil, {{Name: "embed", Attrs: map[string]any{"dim": 512}}}, {{Name: "x", Attrs: map[string]any{"ids": []int{1}}}}} {
		l := attachedLog(t, &countingWriter{}, time.Second)
		rec := ragtime.Record{QueryID: "q", Model: "m<x>", Figures: ragtime.Figures{TTFTMs: &ttft}, Stages: stages}
		if err := l.Done(rec); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rec.DoneEvent()); err != nil {
			t.Fatal(err)
		}
		seq := l.seq - 1
		l.scratch.Reset()
		if err := frameKept(l, len(l.kept)-1); err != nil {
			t.Fatal(err)
		}
		if got, w := l.scratch.String(), fmt.Sprintf("id: %s:%d\nevent: done\ndata: %s\n", l.id, seq, want.String()); got != w {
			t.Errorf("event\n%q, want\n%q", got, w)
		}
	}
}

// BenchmarkStreamToken is the per-token cost of an /ask stream: framing
// the token event, keeping it for resumes and writing it (to a writer that
// keeps nothing).
func BenchmarkStreamToken(b *testing.B) {
	l := attachedLog(b, &countingWriter{}, 10*time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Delta(pipeline.Delta{Text: " prefill"}); err != nil {
			b.Fatal(err)
		}
		if len(l.kept) > 1000 {
			l.kept, l.keptBytes, l.texts = l.kept[:0], 0, l.texts[:0]
		}
	}
}

// BenchmarkStreamStage is the cost of one of an ask's nine stage events.
func BenchmarkStreamStage(b *testing.B) {
	l := attachedLog(b, &countingWriter{}, 10*time.Second)
	sp := ragtime.Span{Name: "llm_connect", Seq: 6, StartMs: 1.136, Attrs: map[string]any{"connect_ms": 0.0, "dns_ms": 0.0, "reused": true, "tls_ms": 0.0}}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Stage(pipeline.StageSpan{Span: sp}); err != nil {
			b.Fatal(err)
		}
		if len(l.kept) > 1000 {
			l.kept, l.keptBytes = l.kept[:0], 0
		}
	}
}

// BenchmarkStreamDone is the cost of an ask's done event: its figures and
// its nine stages with their attributes.
func BenchmarkStreamDone(b *testing.B) {
	l := attachedLog(b, &countingWriter{}, 10*time.Second)
	ttft, overhead := 43.5, 0.4
	rec := ragtime.Record{QueryID: "7a3ea7a3-3678-4666-9ab1-b1ae4fbf55b7", Model: "sim",
		Figures: ragtime.Figures{TTFTMs: &ttft, OverheadMs: &overhead, E2EMs: 342.5, RetrievalMs: 6.5},
		Stages:  pipelinetest.TypicalStages()}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Done(rec); err != nil {
			b.Fatal(err)
		}
		if len(l.kept) > 1000 {
			l.kept, l.keptBytes = l.kept[:0], 0
		}
	}
}

// recordingWriter is a ResponseWriter that keeps what is written to it.
type recordingWriter struct {
	countingWriter
	buf bytes.Buffer
}

func (w *recordingWriter) Write(p []byte) (int, error) { return w.buf.Write(p) }

// TestKeptStagesReplayAsSentPastTheBuffer: stage events are kept as their
// spans, token and reasoning events as their texts (in one buffer, let go
// of from its start as their events are dropped), and framed again for a
// resume; with the bounded buffer dropping the oldest events (meta, stages
// and texts among them), every event still kept frames again to the bytes
// the client was sent.
func TestKeptStagesReplayAsSentPastTheBuffer(t *testing.T) {
	t.Parallel()
	w := &recordingWriter{}
	h := newStreamHub(StreamOptions{WriteTimeout: time.Second, BufferBytes: 900})
	l := &eventLog{hub: h, cancel: func(error) {}}
	l.mu.Lock()
	l.attachLocked(echo.NewResponse(w, nil))
	l.mu.Unlock()
	if err := l.Meta(pipeline.Meta{QueryID: "q1"}); err != nil {
		t.Fatal(err)
	}
	var sent []string // each event's bytes, by sequence
	mark := func() {
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range bytes.SplitAfter(w.buf.Bytes(), []byte("\n\n")) {
			if len(ev) > 0 && !bytes.HasPrefix(ev, []byte("retry:")) {
				sent = append(sent, string(ev))
			}
		}
		w.buf.Reset()
	}
	mark()
	for i := range 12 {
		sp := ragtime.Span{Name: fmt.Sprintf("stage_%d", i), Seq: i, StartMs: float64(i) / 3, DurationMs: 1.25,
			Attrs: map[string]any{"k": i, "store": "<e&m>", "reused": i%2 == 0}}
		if err := l.Stage(pipeline.StageSpan{Span: sp}); err != nil {
			t.Fatal(err)
		}
		if err := l.Delta(pipeline.Delta{Text: fmt.Sprintf(" token %d", i)}); err != nil {
			t.Fatal(err)
		}
		if err := l.Delta(pipeline.Delta{Text: fmt.Sprintf("<thought %d>", i), Reasoning: true}); err != nil {
			t.Fatal(err)
		}
		if i == 1 { // a second meta event is kept framed
			if err := l.Meta(pipeline.Meta{QueryID: "q1", Model: "<m>"}); err != nil {
				t.Fatal(err)
			}
		}
		mark()
	}
	// Twelve stage events were sent, and one framed (the second meta).
	stagesGone, framedGone := 12-len(l.stages), 1-len(l.framed)
	if l.first == 0 || l.meta != nil || stagesGone == 0 || framedGone == 0 || l.textsGone == 0 {
		t.Fatalf("the buffer dropped too little (first %d, meta kept %v, stages dropped %d, framed %d, text bytes %d): the test needs a smaller BufferBytes",
			l.first, l.meta != nil, stagesGone, framedGone, l.textsGone)
	}
	if len(sent) != l.seq {
		t.Fatalf("%d events read from the writer, %d sent", len(sent), l.seq)
	}
	c := l.keptCursor()
	for i, e := range l.kept {
		seq := l.first + i
		l.scratch.Reset()
		if err := l.frameKeptLocked(seq, e, &c); err != nil {
			t.Fatal(err)
		}
		if got := l.scratch.String(); got != sent[seq] {
			t.Errorf("event %d framed again\n%q, was sent as\n%q", seq, got, sent[seq])
		}
	}
}

// frameKept frames kept event i again into l.scratch, as a resume that
// starts there does.
func frameKept(l *eventLog, i int) error {
	c := l.keptCursor()
	for _, e := range l.kept[:i] {
		c.pass(e)
	}
	return l.frameKeptLocked(l.first+i, l.kept[i], &c)
}

// TestLongTokenIsKeptFramed: a text longer than a kept event places
// (maxKeptText) is kept framed, and the texts around it are framed again
// as they were sent.
func TestLongTokenIsKeptFramed(t *testing.T) {
	t.Parallel()
	w := &recordingWriter{}
	l := attachedLog(t, w, time.Second)
	w.buf.Reset()
	texts := []string{"a", strings.Repeat("<long>", maxKeptText/6+1), "b"}
	var sent []string
	for _, text := range texts {
		if err := l.Delta(pipeline.Delta{Text: text}); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, w.buf.String())
		w.buf.Reset()
	}
	if k := l.kept[len(l.kept)-2].kind; k != keptFramed {
		t.Fatalf("the long token was kept as %v", k)
	}
	for i := range texts {
		l.scratch.Reset()
		if err := frameKept(l, len(l.kept)-3+i); err != nil {
			t.Fatal(err)
		}
		if got := l.scratch.String(); got != sent[i] {
			t.Errorf("token %d framed again\n%.80q, was sent as\n%.80q", i, got, sent[i])
		}
	}
}

// TestMetaEventIsKeptAsItsMeta: the meta event is kept as its Meta, not
// framed, and framed again as it was sent.
func TestMetaEventIsKeptAsItsMeta(t *testing.T) {
	t.Parallel()
	w := &recordingWriter{}
	h := newStreamHub(StreamOptions{WriteTimeout: time.Second})
	l := &eventLog{hub: h, cancel: func(error) {}}
	l.mu.Lock()
	l.attachLocked(echo.NewResponse(w, nil))
	l.mu.Unlock()
	w.buf.Reset()
	m := pipeline.Meta{QueryID: "q1", Model: "m<1>", Provider: "openai", TopK: 4, MaxTokens: 64, Embedder: "e & f", Store: "embedded", Reranker: "none"}
	if err := l.Meta(m); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if l.kept[0].kind != keptMeta || len(l.framed) != 0 {
		t.Fatalf("meta kept as %v, %d framed", l.kept[0].kind, len(l.framed))
	}
	l.scratch.Reset()
	if err := frameKept(l, 0); err != nil {
		t.Fatal(err)
	}
	if got, sent := l.scratch.String(), w.buf.String(); got != sent || !strings.Contains(sent, `"model":"m<1>"`) {
		t.Errorf("meta framed again\n%q, was sent as\n%q", got, sent)
	}
}
