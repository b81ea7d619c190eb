package sim

import (
	"context"
	"runtime"
	"time"
)

// spinWindow is how long before a deadline waitUntil stops trusting the
// runtime's timers, which on Linux wake up to about a millisecond late
// (netpoll waits in whole milliseconds), and yields in a loop instead. It
// trades a little CPU for a first token within tens of microseconds of the
// modelled time.
const spinWindow = 1500 * time.Microsecond

// waitUntil blocks until deadline or until ctx is done, whichever is first,
// and reports whether the deadline was reached.
func waitUntil(ctx context.Context, deadline time.Time) bool {
	var t *time.Timer
	for {
		d := time.Until(deadline)
		if d <= 0 {
			return true
		}
		if d > spinWindow {
			if t == nil {
				t = time.NewTimer(d - spinWindow)
				defer t.Stop()
			} else {
				t.Reset(d - spinWindow)
			}
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
			}
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		runtime.Gosched()
	}
}
