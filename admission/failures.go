package admission

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"ragtime/auth"
)

// DefaultMaxFailureAddresses bounds the client addresses Failures
// remembers at once (some 200 bytes each).
const DefaultMaxFailureAddresses = 10_000

// Failures slows the guessing of API keys: it keeps, per client address, a
// token bucket of failed authentications (Rate.N of them at once, refilled
// at Rate), and says how long an address that used them up must wait. It
// remembers at most a fixed number of addresses: idle ones (a full bucket)
// are swept every minute, and past the bound an arbitrary one is dropped
// for a new one, so many addresses cannot grow it. Safe for concurrent use;
// a nil *Failures limits nothing.
type Failures struct {
	limit     rate.Limit
	burst     int
	max       int
	mu        sync.Mutex
	by        map[string]*rate.Limiter
	lastSweep time.Time
}

// NewFailures returns the failure limiter of r for at most maxAddresses
// addresses (<= 0: DefaultMaxFailureAddresses); nil when r is zero (off).
func NewFailures(r auth.Rate, maxAddresses int) *Failures {
	if r.N <= 0 || r.Per <= 0 {
		return nil
	}
	if maxAddresses <= 0 {
		maxAddresses = DefaultMaxFailureAddresses
	}
	return &Failures{limit: rate.Limit(float64(r.N) / r.Per.Seconds()), burst: r.N, max: maxAddresses,
		by: map[string]*rate.Limiter{}}
}

// Wait is how long addr must wait before its next authentication; 0 when
// it may try now.
func (f *Failures) Wait(addr string, now time.Time) time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.by[addr]
	if l == nil {
		return 0
	}
	tokens := l.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - tokens) / float64(f.limit) * float64(time.Second)))
}

// Fail records a failed authentication from addr.
func (f *Failures) Fail(addr string, now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.lastSweep) > idleAfter {
		f.lastSweep = now
		for a, l := range f.by {
			if l.TokensAt(now) >= float64(f.burst) {
				delete(f.by, a)
			}
		}
	}
	l := f.by[addr]
	if l == nil {
		if len(f.by) >= f.max {
			for a := range f.by {
				delete(f.by, a)
				break
			}
		}
		l = rate.NewLimiter(f.limit, f.burst)
		f.by[addr] = l
	}
	l.AllowN(now, 1)
}

// Addresses is how many addresses are remembered.
func (f *Failures) Addresses() int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.by)
}
