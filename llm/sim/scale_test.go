package sim

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"ragtime/internal/openaiwire"
)

// TestDecodeStepGrowsWithTheBatch runs batches of 1, 10 and 100 sequences
// that decode together on a virtual clock: with --itl-ms-per-seq the ITL
// grows by that much per sequence beyond the first, batch 1 keeps --itl-ms,
// and without it the batch does not matter.
func TestDecodeStepGrowsWithTheBatch(t *testing.T) {
	itl := func(perSeq float64, batch int) time.Duration {
		e := newBatchEngine(costs{overhead: 10, itl: 15, perSeq: perSeq}, nil, 256, 1)
		var arrivals []arrival
		for i := range batch {
			arrivals = append(arrivals, arrival{ids: synthIDs(i*100, 20), output: 11})
		}
		seqs := runVirtual(t, []engine{e}, func(int, []uint64) int { return 0 }, arrivals)
		// the first request prefills alone, the rest in the next step;
		// from then on every token of the last one is a step of the
		// whole batch
		s := seqs[len(seqs)-1]
		return s.lastToken.Sub(s.firstToken) / time.Duration(s.emitted-1)
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	var prev time.Duration
	for _, batch := range []int{1, 10, 100} {
		got := itl(0.05, batch)
		if want := ms(15 + 0.05*float64(batch-1)); got != want {
			t.Errorf("batch %d with itl-ms-per-seq 0.05: ITL %v, want %v", batch, got, want)
		}
		if got <= prev {
			t.Errorf("batch %d: ITL %v, not above the smaller batch's %v", batch, got, prev)
		}
		prev = got
		if got := itl(0, batch); got != ms(15) {
			t.Errorf("batch %d with itl-ms-per-seq 0: ITL %v, want itl-ms 15 ms", batch, got)
		}
	}
}

// TestDefaultDecodeStepAtBatch2000 pins the default's meaning: a 7B-class
// model's decode step at batch 2,000 is about 100 ms (docs/llmsim.md).
func TestDefaultDecodeStepAtBatch2000(t *testing.T) {
	c := costsOf(DefaultConfig())
	if got := c.itlMs(nil, 1); got != c.itl {
		t.Errorf("batch 1 step %.3f ms, want itl-ms %.3f", got, c.itl)
	}
	if got := c.itlMs(nil, 2000); got < 80 || got > 150 {
		t.Errorf("default decode step at batch 2,000 is %.1f ms, want about 100 ms", got)
	}
}

func TestNegativeITLPerSeqIsRefused(t *testing.T) {
	_, err := New(Config{ITLMsPerSeq: -1})
	if err == nil || !strings.Contains(err.Error(), "itl-ms-per-seq") {
		t.Fatalf("New with itl-ms-per-seq -1: %v, want an error naming the flag", err)
	}
}

// countingWriter is an http.ResponseWriter that counts writes and flushes.
type countingWriter struct {
	h               http.Header
	body            bytes.Buffer
	writes, flushes int
	status          int
}

func (w *countingWriter) Header() http.Header         { return w.h }
func (w *countingWriter) WriteHeader(status int)      { w.status = status }
func (w *countingWriter) Write(b []byte) (int, error) { w.writes++; return w.body.Write(b) }
func (w *countingWriter) Flush()                      { w.flushes++ }

// TestLaggingWriterCoalesces hands a writer five tokens at once, as when it
// woke a few steps late: they leave in one write and one flush (after the
// role chunk, with the stream's end, as the last token's write carries it),
// and the writer's lag is measured from the oldest of them.
func TestLaggingWriterCoalesces(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Now().Add(-1100 * time.Millisecond)
	sq := newSeq(t0, 10, nil, 0, 5)
	for i := range 5 {
		sq.emit(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	w := &countingWriter{h: http.Header{}}
	msgs := []openaiwire.Message{{Role: "user", Content: "five words come out together"}}
	a := answerer{
		s: s, w: w, req: &openaiwire.ChatRequest{Stream: true, Messages: msgs}, sq: sq, finish: "stop",
		text: newTextSource(0, msgs), enc: openaiwire.NewChunkEncoder("chatcmpl-test", "m", t0.Unix(), false),
	}
	if !a.stream(context.Background()) {
		t.Fatal("stream did not finish")
	}
	if w.writes != 2 || w.flushes != 2 || !strings.HasSuffix(w.body.String(), "data: [DONE]\n\n") {
		t.Errorf("%d writes, %d flushes; want 2 of each (role, then the five tokens and the end)\n%s", w.writes, w.flushes, w.body.String())
	}
	if n := strings.Count(w.body.String(), `"content":"`); n != 6 {
		t.Errorf("%d content deltas, want 6 (the role's empty one and five tokens)", n)
	}
	st := s.Stats()
	if st.TokenWrites != 1 || st.TokensSent != 5 {
		t.Errorf("TokenWrites %d, TokensSent %d; want 1 write carrying 5 tokens", st.TokenWrites, st.TokensSent)
	}
	// the oldest token was released 1.1 s ago, the newest 0.7 s ago: the
	// write's lag, from the oldest, falls in the 1 s < lag ≤ 2.5 s bucket
	if st.WriterLagP99 <= 1 {
		t.Errorf("writer lag p99 %g s, want > 1 s (measured from the oldest token in the write)", st.WriterLagP99)
	}
}
