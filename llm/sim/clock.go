package sim

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// alarm wakes goroutines at deadlines, to within tens of microseconds,
// without spinning.
//
// The runtime's timers alone are about a millisecond late on an idle
// machine: an idle Go scheduler sleeps in epoll_wait, whose timeout is in
// whole milliseconds. A busy scheduler is precise, because every goroutine
// switch checks the timers. So the alarm arms both a runtime timer (precise
// when busy) and, on Linux, a kernel timerfd registered with the runtime's
// poller (an event on it wakes an idle scheduler at once, so it is precise
// when idle). One goroutine serves every deadline of a Server from a heap,
// which keeps one timerfd however many requests wait.
type alarm struct {
	mu   sync.Mutex
	h    wakeHeap
	kick chan struct{}
	hr   hrTimer // nil when only the runtime's timers are used
}

// hrTimer is a high-resolution kernel timer whose expiry the poller sees.
type hrTimer interface {
	// arm makes the timer fire once, d from now.
	arm(d time.Duration)
	// fired receives after each expiry (possibly a stale one).
	fired() <-chan struct{}
	close()
}

type wake struct {
	at time.Time
	ch chan<- struct{}
}

type wakeHeap []wake

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wake)) }
func (h *wakeHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = wake{}
	*h = old[:len(old)-1]
	return w
}

// newAlarm returns an alarm; precise asks for the kernel timer, which is
// used when the platform has one.
func newAlarm(precise bool) *alarm {
	a := &alarm{kick: make(chan struct{}, 1)}
	if precise {
		if hr, err := newHRTimer(); err == nil {
			a.hr = hr
		}
	}
	return a
}

// at sends on ch (without blocking: give it a buffer of 1) at or just after
// t. A goroutine may get stale sends from earlier deadlines and must
// recheck the time when woken.
func (a *alarm) at(t time.Time, ch chan<- struct{}) {
	a.mu.Lock()
	heap.Push(&a.h, wake{at: t, ch: ch})
	first := a.h[0].ch == ch && a.h[0].at.Equal(t)
	a.mu.Unlock()
	if first {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
}

// run fires deadlines until ctx ends.
func (a *alarm) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var fired <-chan struct{}
	if a.hr != nil {
		defer a.hr.close()
		fired = a.hr.fired()
	}
	var armed time.Time
	for {
		now := time.Now()
		a.mu.Lock()
		for len(a.h) > 0 && !a.h[0].at.After(now) {
			w := heap.Pop(&a.h).(wake)
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
		var next time.Time
		if len(a.h) > 0 {
			next = a.h[0].at
		}
		a.mu.Unlock()
		if !next.IsZero() && !next.Equal(armed) {
			d := next.Sub(now)
			timer.Reset(d)
			if a.hr != nil {
				a.hr.arm(d)
			}
			armed = next
		}
		select {
		case <-a.kick:
		case <-timer.C:
		case <-fired:
		case <-ctx.Done():
			return
		}
	}
}

// sleepUntil blocks until deadline or until ctx is done, whichever is
// first, and reports whether the deadline was reached. Besides the alarm
// (on time when the process is idle) it arms a runtime timer of its own,
// which on a busy process readies the sleeper directly: through the alarm
// the wake takes two more hand-offs (the timerfd's reader, the alarm's
// goroutine), each a wait in the run queue under load.
func (a *alarm) sleepUntil(ctx context.Context, deadline time.Time) bool {
	ch := make(chan struct{}, 1)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		if !time.Now().Before(deadline) {
			return true
		}
		a.at(deadline, ch)
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			return false
		}
	}
}
