package rxstamp

import (
	"sync/atomic"
	"time"
)

// At holds one time on the monotonic clock where an atomic must hold it
// (a connection's latest stamp, read by another goroutine than the one
// that reads the connection). The zero value holds the zero time.
type At struct{ ns atomic.Int64 } // nanoseconds since base, 0: the zero time

// base anchors At's times on the monotonic clock.
var base = time.Now()

// Store sets the time to t; the zero time clears it.
func (a *At) Store(t time.Time) { a.ns.Store(encode(t)) }

// Load returns the time held.
func (a *At) Load() time.Time { return decode(a.ns.Load()) }

// Take returns the time held and clears it.
func (a *At) Take() time.Time { return decode(a.ns.Swap(0)) }

func encode(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return int64(t.Sub(base)) | 1 // never 0
}

func decode(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return base.Add(time.Duration(ns))
}
