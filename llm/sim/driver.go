package sim

import (
	"context"
	"sync/atomic"
	"time"
)

// driver runs one engine on the wall clock: a single goroutine that sleeps
// until the engine's next step is due, advances it, and so wakes the writers
// of the sequences that got a token. Writers never sleep per token.
type driver struct {
	eng engine
	in  chan *seq
	// hr is the driver's own kernel timer (nil with coarse timers or where
	// there is none); without it the shared alarm wakes the driver.
	hr    hrTimer
	alarm *alarm
	wake  chan struct{}

	running, waiting atomic.Int64
	// queued counts sequences handed over but not yet running (waiting in
	// the engine or still in the channel).
	queued atomic.Int64
	steps  atomic.Int64
	// inflight counts requests routed to this driver and not yet answered;
	// admission control reads it.
	inflight atomic.Int64
	// lag is how late the driver advanced the engine past each due time
	// (the scheduler's lag, apart from the writers'); drivers of one server
	// share it.
	lag *histogram
}

// newDriver returns a driver of eng; precise asks for a kernel timer of its
// own, as for the alarm.
func newDriver(eng engine, a *alarm, lag *histogram, precise bool) *driver {
	d := &driver{eng: eng, in: make(chan *seq, 4096), alarm: a, wake: make(chan struct{}, 1), lag: lag}
	if precise {
		if hr, err := newHRTimer(); err == nil {
			d.hr = hr
		}
	}
	return d
}

// submit hands s to the engine, or reports false if ctx ends first.
func (d *driver) submit(ctx context.Context, s *seq) bool {
	d.queued.Add(1)
	select {
	case d.in <- s:
		return true
	case <-ctx.Done():
		d.queued.Add(-1)
		return false
	}
}

func (d *driver) publish() {
	r, w := d.eng.load()
	d.running.Store(int64(r))
	d.waiting.Store(int64(w))
	d.queued.Store(int64(w + len(d.in)))
}

// run drives the engine until ctx ends. It blocks between steps (polling
// the clock only through the last spinAhead before a sparse step): the
// alarm wakes it within tens of microseconds of each due time, and
// arrivals wake it at once.
//
// The driver arms a kernel timer of its own (which wakes an idle process on
// time; it is re-armed every step, and going through the shared alarm would
// cost a hand-off to the alarm's goroutine each way) and a runtime timer:
// on a busy process the runtime fires that at the next goroutine switch and
// readies the driver directly. Without a kernel timer the shared alarm
// stands in for it.
//
// Only the planned early wake spins: the alarm's and the timer's wakes for
// a step already taken (each step is armed on both, so the slower one
// arrives stale) and arrivals do not, or a driver whose steps are dense
// (many sequences on their own timelines) would spin most of the time.
func (d *driver) run(ctx context.Context) {
	var next, armed, wakeAt time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var fired <-chan struct{}
	if d.hr != nil {
		defer d.hr.close()
		fired = d.hr.fired()
	}
	for {
		// take every arrival already handed over before stepping: a step
		// planned without them would admit them a step late, or later if
		// the driver woke late
		for drained := false; !drained; {
			select {
			case s := <-d.in:
				d.eng.add(s)
			default:
				drained = true
			}
		}
		now := time.Now()
		if !next.IsZero() && !now.Before(next) {
			d.lag.observe(now.Sub(next).Seconds())
		}
		next = d.eng.advance(now)
		d.publish()
		if be, ok := d.eng.(*batchEngine); ok {
			d.steps.Store(be.steps)
		}
		if !next.IsZero() && !next.Equal(armed) {
			wakeAt = next
			if next.Sub(now) >= spinSparse {
				wakeAt = next.Add(-spinAhead)
			}
			until := time.Until(wakeAt)
			if d.hr != nil {
				d.hr.arm(until)
			} else {
				d.alarm.at(wakeAt, d.wake)
			}
			timer.Reset(until)
			armed = next
		}
		select {
		case s := <-d.in:
			d.eng.add(s)
		case <-d.wake:
			d.spinUntil(wakeAt, next)
		case <-fired:
			d.spinUntil(wakeAt, next)
		case <-timer.C:
			d.spinUntil(wakeAt, next)
		case <-ctx.Done():
			return
		}
	}
}

// A driver whose next step is at least spinSparse away wakes spinAhead
// early and polls the clock through the rest: the wake-up of an idle
// process (a halted virtual CPU, a parked thread) then falls before the
// due time instead of after it. It costs at most spinAhead per spinSparse
// of one core (4 %), and nothing when steps are closer.
const (
	spinAhead  = 200 * time.Microsecond
	spinSparse = 5 * time.Millisecond
)

// spinUntil polls the clock until next, taking arrivals meanwhile, when
// the driver woke early on purpose: wakeAt, the wake it planned, is before
// next and due.
func (d *driver) spinUntil(wakeAt, next time.Time) {
	if next.IsZero() || !wakeAt.Before(next) {
		return
	}
	if now := time.Now(); now.Before(wakeAt) || next.Sub(now) > spinAhead {
		return
	}
	for time.Now().Before(next) {
		select {
		case s := <-d.in:
			d.eng.add(s)
		default:
		}
	}
}
