package llm

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"ragtime/pipeline"
)

// TestDeltasAreTimedWhenTheyReachedTheSocket: a chunk that waits in the
// socket while the caller is busy with the one before it keeps the time it
// arrived, by the kernel's stamp: 5 ms after the first, not the 50 ms the
// caller took. On a kernel without stamps the second would be timed after
// the wait, and the first token's time (llm_prefill's end) likewise.
func TestDeltasAreTimedWhenTheyReachedTheSocket(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("kernel receive stamps are read on Linux only")
	}
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, tok := range []string{"Hello", " world"} {
			if i > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
			w.(http.Flusher).Flush()
		}
		time.Sleep(80 * time.Millisecond) // both chunks sit in the socket while the caller waits
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	g := newOpenAIClient(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The kernel turns stamping on a moment after the first socket asks
	// (package rxstamp): a bounded few tries.
	for try := 0; ; try++ {
		var deltas []pipeline.Delta
		_, err := generate(ctx, g, testRequest, func(d pipeline.Delta) error {
			if len(deltas) == 0 {
				time.Sleep(50 * time.Millisecond) // the caller is busy
			}
			deltas = append(deltas, d)
			return nil
		})
		if err != nil || len(deltas) != 2 {
			t.Fatalf("%d deltas, %v; want 2", len(deltas), err)
		}
		gap := deltas[1].At.Sub(deltas[0].At)
		if gap >= 45*time.Millisecond && try < 20 {
			continue // this connection's reads were not stamped yet
		}
		if gap < 0 || gap >= 45*time.Millisecond {
			t.Errorf("the second delta came %v after the first; want about the 5 ms between their arrivals, not the caller's 50 ms", gap)
		}
		return
	}
}
