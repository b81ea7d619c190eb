package admission

import (
	"context"
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
//
// Shared with other replicas (Share), each failure is also taken from one
// bucket per address that every replica counts in (a RateLimiter such as
// redisstate.Store): an address that used it up is refused here for the
// time the shared bucket says, whichever replica saw its failures. The
// local buckets keep counting, so a shared limiter that fails leaves the
// per-replica limit in force.
type Failures struct {
	limit     rate.Limit
	burst     int
	max       int
	per       auth.Rate
	shared    RateLimiter
	mu        sync.Mutex
	by        map[string]*rate.Limiter
	blocked   map[string]time.Time // shared: refused until
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
	return &Failures{limit: rate.Limit(float64(r.N) / r.Per.Seconds()), burst: r.N, max: maxAddresses, per: r,
		by: map[string]*rate.Limiter{}, blocked: map[string]time.Time{}}
}

// Share counts every failure also in shared's bucket of its address (key
// "authfail:" + address), across replicas; nil shares nothing. Call it
// before the first Fail. It returns f.
func (f *Failures) Share(shared RateLimiter) *Failures {
	if f != nil {
		f.shared = shared
	}
	return f
}

// Wait is how long addr must wait before its next authentication; 0 when
// it may try now.
func (f *Failures) Wait(addr string, now time.Time) time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var wait time.Duration
	if until, ok := f.blocked[addr]; ok {
		wait = until.Sub(now)
	}
	l := f.by[addr]
	if l == nil {
		return max(wait, 0)
	}
	if tokens := l.TokensAt(now); tokens < 1 {
		wait = max(wait, time.Duration(math.Ceil((1-tokens)/float64(f.limit)*float64(time.Second))))
	}
	return max(wait, 0)
}

// Fail records a failed authentication from addr: in the local bucket and,
// when shared, in the shared one (a round trip; an error there leaves the
// local count alone in force).
func (f *Failures) Fail(ctx context.Context, addr string, now time.Time) {
	if f == nil {
		return
	}
	if f.shared != nil {
		if retry, err := f.shared.Take(ctx, "authfail:"+addr, f.per, f.burst); err == nil && retry > 0 {
			f.mu.Lock()
			if _, ok := f.blocked[addr]; !ok && len(f.blocked) >= f.max {
				for a := range f.blocked {
					delete(f.blocked, a)
					break
				}
			}
			f.blocked[addr] = now.Add(retry)
			f.mu.Unlock()
		}
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
		for a, until := range f.blocked {
			if !now.Before(until) {
				delete(f.blocked, a)
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
