package admission

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"ragtime/auth"
)

func mustNew(t *testing.T, cfg Config) *Controller {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rejection(t *testing.T, err error, reason string) *Rejection {
	t.Helper()
	var r *Rejection
	if !errors.As(err, &r) || r.Reason != reason {
		t.Fatalf("got %v, want a %s rejection", err, reason)
	}
	if r.Retry <= 0 {
		t.Errorf("%s: Retry %v, want > 0", reason, r.Retry)
	}
	return r
}

func TestRateLimitRefusesBeyondTheBurst(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	who := Caller{ID: "ip:a", Limits: Limits{Rate: auth.Rate{N: 60, Per: time.Minute}}} // 1/s, burst 10
	for i := range 10 {
		tk, err := c.Admit(context.Background(), who)
		if err != nil {
			t.Fatalf("ask %d: %v", i, err)
		}
		tk.Release()
	}
	_, err := c.Admit(context.Background(), who)
	if r := rejection(t, err, ReasonRate); r.Retry > time.Second {
		t.Errorf("retry %v, want at most 1s at 60/min", r.Retry)
	}
	// Another caller has its own bucket.
	if _, err := c.Admit(context.Background(), Caller{ID: "ip:b", Limits: who.Limits}); err != nil {
		t.Fatalf("another caller: %v", err)
	}
	now = now.Add(time.Second)
	if _, err := c.Admit(context.Background(), who); err != nil {
		t.Fatalf("after a second: %v", err)
	}
}

func TestCallerBoundWaitsThenRefuses(t *testing.T) {
	t.Parallel()
	who := Caller{ID: "ip:a", Limits: Limits{Concurrent: 1}}

	// A slot freed during the wait is taken. The first is released once the
	// second is seen waiting, not after a sleep that a loaded machine can
	// stretch past the wait; MaxWait is then only a bound, never reached.
	c := mustNew(t, Config{MaxStreams: 10, MaxWait: time.Minute})
	first, err := c.Admit(context.Background(), who)
	if err != nil {
		t.Fatal(err)
	}
	admitted := make(chan struct{})
	go func() {
		for !c.callerWaiting(who.ID) {
			select {
			case <-admitted:
				return
			case <-time.After(time.Millisecond):
			}
		}
		first.Release()
	}()
	second, err := c.Admit(context.Background(), who)
	close(admitted)
	if err != nil {
		t.Fatalf("second ask should have waited for the first: %v", err)
	}
	second.Release()

	// A slot still taken when the wait ends: refused.
	c = mustNew(t, Config{MaxStreams: 10, MaxWait: 30 * time.Millisecond})
	held, err := c.Admit(context.Background(), who)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Admit(context.Background(), who)
	rejection(t, err, ReasonCaller)
	// Others are not held up by this caller.
	other, err := c.Admit(context.Background(), Caller{ID: "ip:b", Limits: who.Limits})
	if err != nil {
		t.Fatal(err)
	}
	held.Release()
	other.Release()
	if st := c.Stats(); st.Running != 0 || st.Queued != 0 || st.Rejected[ReasonCaller] != 1 {
		t.Errorf("stats after release %+v", st)
	}
}

// callerWaiting reports whether an ask of caller id waits for its slot.
func (c *Controller) callerWaiting(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.callers[id]
	return cl != nil && cl.waiting > 0
}

func TestServerBoundRefusesWith503Reason(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{MaxStreams: 2, MaxWait: 20 * time.Millisecond})
	var held []*Ticket
	for i := range 2 {
		tk, err := c.Admit(context.Background(), Caller{ID: string(rune('a' + i))})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tk)
	}
	_, err := c.Admit(context.Background(), Caller{ID: "c"})
	rejection(t, err, ReasonServer)
	held[0].Release()
	held[0].Release() // twice is harmless
	tk, err := c.Admit(context.Background(), Caller{ID: "c"})
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	tk.Release()
	held[1].Release()
}

func TestWaitingIsBounded(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{MaxStreams: 1, MaxWait: time.Minute})
	tk, err := c.Admit(context.Background(), Caller{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { _, err := c.Admit(ctx, Caller{ID: "b"}); waited <- err }()
	for c.Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	// The queue holds as many as there are slots: the next is refused at
	// once, not after a minute.
	start := time.Now()
	_, err = c.Admit(context.Background(), Caller{ID: "c"})
	rejection(t, err, ReasonServer)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refusal took %v", d)
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("a caller gone while waiting: %v", err)
	}
	tk.Release()
}

func TestIdleCallersAreForgotten(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	for _, id := range []string{"a", "b", "c"} {
		tk, err := c.Admit(context.Background(), Caller{ID: id, Limits: Limits{Rate: auth.Rate{N: 60, Per: time.Minute}, Concurrent: 1}})
		if err != nil {
			t.Fatal(err)
		}
		tk.Release()
	}
	now = now.Add(2 * idleAfter)
	if _, err := c.Admit(context.Background(), Caller{ID: "d"}); err != nil {
		t.Fatal(err)
	}
	if n := c.Stats().Callers; n != 1 {
		t.Errorf("%d callers remembered, want 1", n)
	}
}

// Two asks arriving together for one slot, the caller's or the process's:
// one is admitted and the other waits for it, never refused. An ask that
// took a free slot at once was counted as waiting until it had, and an ask
// checking the queue in that moment was refused for a queue that held no
// one (TestQueuedAskWaitsInTheQueueStage in cmd/ragtime saw the 429).
func TestTwoAsksForOneSlotBothAdmitted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		who  Caller
	}{
		{"caller", Config{MaxWait: time.Minute}, Caller{ID: "ip:a", Limits: Limits{Concurrent: 1}}},
		{"process", Config{MaxStreams: 1, MaxWait: time.Minute}, Caller{ID: "ip:a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for range 2000 {
				c := mustNew(t, tc.cfg)
				start := make(chan struct{})
				errs := make(chan error, 2)
				for range 2 {
					go func() {
						<-start
						tk, err := c.Admit(context.Background(), tc.who)
						if err == nil {
							tk.Release()
						}
						errs <- err
					}()
				}
				close(start)
				for range 2 {
					if err := <-errs; err != nil {
						t.Fatalf("one of two asks for one slot: %v", err)
					}
				}
			}
		})
	}
}

// TestFailuresSlowAnAddressAndStayBounded: an address that failed N times
// in the window waits until the bucket refills; another address is not
// slowed; many addresses never hold more than the bound.
func TestFailuresSlowAnAddressAndStayBounded(t *testing.T) {
	t.Parallel()
	f := NewFailures(auth.Rate{N: 5, Per: time.Minute}, 100)
	now := time.Unix(1_700_000_000, 0)
	for i := range 5 {
		if w := f.Wait("203.0.113.7", now); w != 0 {
			t.Fatalf("failure %d: wait %s before the burst is used", i, w)
		}
		f.Fail(context.Background(), "203.0.113.7", now)
	}
	if w := f.Wait("203.0.113.7", now); w < 11*time.Second || w > 12*time.Second {
		t.Errorf("after 5 failures of 5/min: wait %s, want the 12 s one failure takes to refill", w)
	}
	if w := f.Wait("203.0.113.8", now); w != 0 {
		t.Errorf("another address waits %s", w)
	}
	if w := f.Wait("203.0.113.7", now.Add(12*time.Second)); w != 0 {
		t.Errorf("12 s later: wait %s", w)
	}
	for i := range 1000 {
		f.Fail(context.Background(), fmt.Sprintf("198.51.%d.%d", i/256, i%256), now)
	}
	if n := f.Addresses(); n > 100 {
		t.Errorf("%d addresses remembered, bound 100", n)
	}
	f.Fail(context.Background(), "203.0.113.9", now.Add(2*time.Minute)) // sweeps the idle ones
	if n := f.Addresses(); n != 1 {
		t.Errorf("%d addresses remembered after two idle minutes, want 1", n)
	}
	var off *Failures = NewFailures(auth.Rate{}, 0)
	off.Fail(context.Background(), "203.0.113.7", now)
	if off != nil || off.Wait("203.0.113.7", now) != 0 {
		t.Error("a zero rate limits")
	}
}
