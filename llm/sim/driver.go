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
	eng     engine
	in      chan *seq
	precise bool

	running, waiting atomic.Int64
	// queued counts sequences handed over but not yet running (waiting in
	// the engine or still in the channel).
	queued atomic.Int64
	steps  atomic.Int64
	// inflight counts requests routed to this driver and not yet answered;
	// admission control reads it.
	inflight atomic.Int64
	// lag is how late the driver advanced the engine past each due time.
	lag *histogram
}

func newDriver(eng engine, precise bool) *driver {
	return &driver{eng: eng, in: make(chan *seq, 4096), precise: precise, lag: newHistogram(lagBuckets)}
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

func (d *driver) add(s *seq) {
	d.eng.add(s)
}

func (d *driver) publish() {
	r, w := d.eng.load()
	d.running.Store(int64(r))
	d.waiting.Store(int64(w))
	d.queued.Store(int64(w + len(d.in)))
}

// run drives the engine until ctx ends.
func (d *driver) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var next time.Time
	for {
		now := time.Now()
		if !next.IsZero() && !now.Before(next) {
			d.lag.observe(now.Sub(next).Seconds())
		}
		next = d.eng.advance(now)
		d.publish()
		if be, ok := d.eng.(*batchEngine); ok {
			d.steps.Store(be.steps)
		}
		if next.IsZero() {
			select {
			case s := <-d.in:
				d.add(s)
			case <-ctx.Done():
				return
			}
			continue
		}
		wait := time.Until(next)
		if wait > spinWindow || (!d.precise && wait > 0) {
			if d.precise {
				wait -= spinWindow
			}
			timer.Reset(wait)
			select {
			case s := <-d.in:
				d.add(s)
				if !timer.Stop() {
					<-timer.C
				}
			case <-timer.C:
			case <-ctx.Done():
				return
			}
			continue
		}
		// The last stretch: poll arrivals without yielding. Yielding would
		// queue the driver behind every runnable writer and make it late by
		// milliseconds under load; holding the core for at most spinWindow
		// per step does not.
	spin:
		for time.Now().Before(next) {
			select {
			case s := <-d.in:
				d.add(s)
				break spin
			case <-ctx.Done():
				return
			default:
			}
		}
	}
}
