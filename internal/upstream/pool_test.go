package upstream

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// TestUnlimitedPoolKeepsEveryConnectionInFlight: a Pool without a size
// (serve with --max-concurrent 0) keeps every connection that was in flight
// at once, past the 1,024 it used to fall back to: a second wave of as
// many concurrent calls opens no connection (each one opened beyond the
// pool's size would have left a socket in TIME_WAIT per call).
func TestUnlimitedPoolKeepsEveryConnectionInFlight(t *testing.T) {
	t.Parallel()
	const inFlight = 1100
	var opened atomic.Int64
	var arrived sync.WaitGroup
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived.Done()
		<-release
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := NewPool(Options{}).Client(srv.URL)
	t.Cleanup(c.CloseIdleConnections)

	wave := func() {
		t.Helper()
		arrived.Add(inFlight)
		release = make(chan struct{})
		errs := make(chan error, inFlight)
		var done sync.WaitGroup
		for range inFlight {
			done.Go(func() {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
				if err != nil {
					errs <- err
					return
				}
				resp, err := c.Do(req, nil)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				errs <- resp.Body.Close()
			})
		}
		arrived.Wait() // every call holds its connection at once
		close(release)
		done.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	wave()
	if n := opened.Load(); n != inFlight {
		t.Fatalf("the first wave opened %d connections, want %d", n, inFlight)
	}
	wave()
	if n := opened.Load() - inFlight; n != 0 {
		t.Errorf("the second wave of %d calls opened %d connections: the idle pool dropped them", inFlight, n)
	}
}
