package upstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"ragtime/internal/rxstamp/rxstamptest"
)

// TestReceivedIsWhenTheChunkReachedTheSocket: a streamed chunk read 50 ms
// after it came is stamped when it reached ragtime's socket, not when it
// was read, on a Pool's connection, and the first response byte (the
// server wait's end) is no later than the response's return.
func TestReceivedIsWhenTheChunkReachedTheSocket(t *testing.T) {
	t.Parallel()
	rxstamptest.Need(t)
	sent := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		before := time.Now()
		io.WriteString(w, "data: a\n\n")
		w.(http.Flusher).Flush()
		sent <- before
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := NewPool(Options{}).Client(srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The kernel turns stamping on a moment after the first socket asks
	// (rxstamp): a bounded few tries for a stamped connection.
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr := &Trace{}
		resp, err := c.Do(req, tr)
		if err != nil {
			t.Fatal(err)
		}
		returned := time.Now()
		if wait := tr.ServerWait(); wait <= 0 || tr.WroteRequest().Add(wait).After(returned) {
			t.Errorf("server wait %v ends after the response returned", wait)
		}
		at := <-sent
		time.Sleep(50 * time.Millisecond) // the reader waits to run
		buf := make([]byte, 64)
		n, err := resp.Body.Read(buf)
		read := time.Now()
		resp.Body.Close()
		if err != nil || string(buf[:n]) != "data: a\n\n" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		received := tr.Received()
		if received.IsZero() && try < 20 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if received.IsZero() {
			t.Fatal("no chunk of twenty was stamped")
		}
		if received.Before(at.Add(-time.Millisecond)) || read.Sub(received) < 40*time.Millisecond {
			t.Errorf("the chunk was stamped %v after it was sent and %v before it was read; want after, and the 50 ms wait before",
				received.Sub(at), read.Sub(received))
		}
		return
	}
}
