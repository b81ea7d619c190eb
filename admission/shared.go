package admission

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"ragtime/auth"
)

// RateLimiter takes asks from buckets, one per key: r refilled
// continuously, with room for burst asks at once. Take returns 0 when the
// ask is taken, else how long until one would be (and takes nothing).
// LocalRates counts in this process; redisstate.Store in one bucket shared
// by every replica. Any per-key limit (a caller's asks, an address's
// failed authentications) can be counted by either.
type RateLimiter interface {
	Take(ctx context.Context, key string, r auth.Rate, burst int) (retry time.Duration, err error)
}

// Leaser hands out one of limit leases on a key, shared by every replica
// (redisstate.Store): release gives it back; nil (and no error) when all
// limit are held. A lease outlives a replica that died only by its TTL.
type Leaser interface {
	Lease(ctx context.Context, key string, limit int) (release func(), err error)
}

// Shared is the state replicas share (redisstate.Store): with it the
// per-caller rate and streams, and the backend's streams, are counted
// across replicas; when a call fails the Controller counts in the process
// instead (its own buckets and slots), never failing the ask for it.
type Shared interface {
	RateLimiter
	Leaser
	// Admit takes, in one round trip, an ask from a bucket (when ask.Rate
	// is set) and then one lease of each of ask.Leases, all or none: an
	// ask's whole admission in the common case, where nothing is full.
	Admit(ctx context.Context, ask SharedAsk) (SharedGrant, error)
}

// SharedAsk is what an ask takes from Shared at once: an ask from the
// bucket RateKey (r refilled continuously, room for Burst; the zero Rate
// takes none) and a lease of each of Leases.
type SharedAsk struct {
	RateKey string
	Rate    auth.Rate
	Burst   int
	Leases  []SharedLease
}

// SharedLease is one of Limit leases on Key.
type SharedLease struct {
	Key   string
	Limit int
}

// SharedGrant is Shared.Admit's answer. Retry > 0: the bucket was empty
// and nothing was taken. Else the ask was taken from the bucket, and
// either Full is -1 and Release gives back the leases taken, or Full is
// the index of a lease found all held and no lease was taken.
type SharedGrant struct {
	Retry   time.Duration
	Full    int
	Release func()
}

// Burst is the burst a bucket of r allows: ten seconds' worth, at least
// one.
func Burst(r auth.Rate) int {
	if r.N <= 0 || r.Per <= 0 {
		return 0
	}
	return max(1, int(math.Ceil(float64(r.N)/r.Per.Seconds()*10)))
}

// LocalRates is a RateLimiter counting in this process (x/time/rate
// buckets). Buckets idle and full again are forgotten after a minute, so
// many distinct keys cannot grow it without bound. Safe for concurrent use.
type LocalRates struct {
	now       func() time.Time
	mu        sync.Mutex
	buckets   map[string]*localBucket
	lastSweep time.Time
}

type localBucket struct {
	r     auth.Rate
	burst int
	l     *rate.Limiter
}

// NewLocalRates returns an empty LocalRates.
func NewLocalRates() *LocalRates {
	return &LocalRates{now: time.Now, buckets: map[string]*localBucket{}}
}

// Take implements RateLimiter. A key's bucket is made again, full, when
// its rate or burst changes.
func (l *LocalRates) Take(_ context.Context, key string, r auth.Rate, burst int) (time.Duration, error) {
	if r.N <= 0 || r.Per <= 0 {
		return 0, nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > idleAfter {
		l.lastSweep = now
		for k, b := range l.buckets {
			if b.l.TokensAt(now) >= float64(b.burst) {
				delete(l.buckets, k)
			}
		}
	}
	b := l.buckets[key]
	if b == nil || b.r != r || b.burst != burst {
		b = &localBucket{r: r, burst: max(1, burst), l: rate.NewLimiter(rate.Limit(float64(r.N)/r.Per.Seconds()), max(1, burst))}
		l.buckets[key] = b
	}
	res := b.l.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, nil
	}
	return 0, nil
}
