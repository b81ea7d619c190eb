package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"ragtime/pipeline"
)

// TestAppendSpanMatchesEncodingJSON: a hand-framed stage event carries
// exactly what encoding/json (HTML escaping off) writes, and spans it
// cannot frame are left to encoding/json.
func TestAppendSpanMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	spans := []pipeline.Span{
		{Name: "queue", Seq: 0, StartMs: 0, DurationMs: 0, Attrs: map[string]any{"limit": 0}},
		{Name: "accept", Seq: 0},
		{Name: "embed", Seq: 2, StartMs: 0.211, DurationMs: 12.5, Attrs: map[string]any{"embedder": "openai:<m&x>", "dim": 512, "reused": true, "dns_ms": 0.0, "connect_ms": 1e-7, "tls_ms": 3e21}},
		{Name: "search", Seq: 3, StartMs: 1234567.891, DurationMs: 0.000001, Attrs: map[string]any{"k": 4, "hits": int64(4), "store": "embedded", "exact": false, "ef": 64}},
		{Name: "llm_prefill", Seq: 7, StartMs: -0.5, DurationMs: 150.25, Attrs: map[string]any{"status": 200, "server_prefill_ms": 98.765432, "z\u2028key": "v\"al\\ue\n"}},
		{Name: "llm_decode", Seq: 8, Attrs: map[string]any{}},
	}
	for _, sp := range spans {
		got, ok := appendSpan(nil, sp)
		if !ok {
			t.Errorf("%s: not framed", sp.Name)
			continue
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(sp); err != nil {
			t.Fatal(err)
		}
		if string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("%s:\n got %s\nwant %s", sp.Name, got, want.String())
		}
	}
	for _, sp := range []pipeline.Span{
		{Name: "x", Attrs: map[string]any{"list": []string{"a"}}},
		{Name: "x", StartMs: math.NaN()},
		{Name: "x", Attrs: map[string]any{"f": math.Inf(1)}},
	} {
		if _, ok := appendSpan(nil, sp); ok {
			t.Errorf("%+v was framed by hand", sp)
		}
	}
}

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
	l.attachLocked(w)
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
	if w.flushes != 101 {
		t.Errorf("%d flushes for 101 events", w.flushes)
	}
	// A deadline with less than WriteTimeout left is moved before the write.
	l.sink.deadline = time.Now().Add(timeout / 2)
	if err := l.Delta(pipeline.Delta{Text: "tok "}); err != nil {
		t.Fatal(err)
	}
	if len(w.deadlines) != 2 || w.deadlines[1].Before(time.Now().Add(timeout)) {
		t.Errorf("deadlines %v: the nearly spent one was not moved a WriteTimeout ahead", w.deadlines)
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
		if err := l.frameKeptLocked(seq, l.kept[len(l.kept)-1]); err != nil {
			t.Fatal(err)
		}
		if got, w := l.scratch.String(), fmt.Sprintf("id: %s:%d\nevent: %s\ndata: %s\n", l.id, seq, name, want.String()); got != w {
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
			l.kept, l.keptBytes = l.kept[:0], 0
		}
	}
}

// BenchmarkStreamStage is the cost of one of an ask's nine stage events.
func BenchmarkStreamStage(b *testing.B) {
	l := attachedLog(b, &countingWriter{}, 10*time.Second)
	sp := pipeline.Span{Name: "llm_connect", Seq: 6, StartMs: 1.136, Attrs: map[string]any{"connect_ms": 0.0, "dns_ms": 0.0, "reused": true, "tls_ms": 0.0}}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Stage(sp); err != nil {
			b.Fatal(err)
		}
		if len(l.kept) > 1000 {
			l.kept, l.keptBytes = l.kept[:0], 0
		}
	}
}
