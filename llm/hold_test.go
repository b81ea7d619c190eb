package llm

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"ragtime"
	"ragtime/internal/rxstamp/rxstamptest"
	"ragtime/pipeline"
)

// TestDeltasOfOneReadAreMarkedMore: the deltas that arrive in one network
// read reach the caller with all but the last marked More, and the last is
// emitted before the reader waits on the network again: the server sends
// the rest of the answer only once the caller has had it.
func TestDeltasOfOneReadAreMarkedMore(t *testing.T) {
	t.Parallel()
	had := make(chan struct{})
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		burst := ""
		for _, s := range []string{"a", "b", "c"} {
			burst += fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", s)
		}
		_, _ = w.Write([]byte(burst)) // one write, one flush: one read for the client
		w.(http.Flusher).Flush()
		select {
		case <-had:
		case <-time.After(10 * time.Second): // the caller never had "c": it was held across the wait
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"d\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}))
	g, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.CloseIdleConnections()
	var got []string
	start := time.Now()
	_, err = generate(context.Background(), g, testRequest, func(d pipeline.Delta) error {
		got = append(got, fmt.Sprintf("%s more=%v", d.Text, d.More))
		if d.Text == "c" {
			close(had)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a more=true", "b more=true", "c more=false", "d more=false"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deltas %q (after %v), want %q", got, time.Since(start).Round(time.Millisecond), want)
	}
}

// TestHeldDeltaSentBeforeAnError: a delta received just before a malformed
// chunk still reaches the caller, before the error is returned.
func TestHeldDeltaSentBeforeAnError(t *testing.T) {
	t.Parallel()
	srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {not json\n\n"))
	}))
	g, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.CloseIdleConnections()
	var got []pipeline.Delta
	_, err = generate(context.Background(), g, testRequest, func(d pipeline.Delta) error {
		got = append(got, d)
		return nil
	})
	checkError(t, err, CodeBadStream, ragtime.StageLLMDecode)
	if len(got) != 1 || got[0].Text != "a" || got[0].More {
		t.Errorf("deltas %+v, want \"a\" without More", got)
	}
}

// TestDeltasAreTimedWhenTheyReachedTheSocket: a chunk that waits in the
// socket while the caller is busy with the one before it keeps the time it
// arrived, by the kernel's stamp: 5 ms after the first, not the 50 ms the
// caller took. On a kernel without stamps the second would be timed after
// the wait, and the first token's time (llm_prefill's end) likewise.
func TestDeltasAreTimedWhenTheyReachedTheSocket(t *testing.T) {
	t.Parallel()
	rxstamptest.Need(t)
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
