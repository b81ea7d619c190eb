package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"ragtime/auth"
)

// Limits bound one caller.
type Limits struct {
	// Concurrent bounds the caller's streams running at once; 0 means no
	// per-caller bound (the process bound still applies).
	Concurrent int
	// Rate bounds the caller's asks (refilled continuously, bursts of ten
	// seconds' worth); the zero Rate means no rate limit.
	Rate auth.Rate
}

// Caller is who is asking, as admission control sees it.
type Caller struct {
	// ID keys the caller's limits and counters: "ip:203.0.113.7" for an
	// unauthenticated client, a key's id once keys exist. Never a secret.
	ID     string
	Limits Limits
}

// limiter is the token bucket of r: r.N per r.Per, refilled continuously,
// with a burst of ten seconds' worth (at least one); nil for no limit.
func limiter(r auth.Rate) *rate.Limiter {
	if r.N <= 0 || r.Per <= 0 {
		return nil
	}
	perSecond := float64(r.N) / r.Per.Seconds()
	return rate.NewLimiter(rate.Limit(perSecond), max(1, int(math.Ceil(perSecond*10))))
}

// Why an ask was refused. Each is a *Rejection; its Retry says when to try
// again.
const (
	// ReasonRate: the caller used up its asks per minute (HTTP 429).
	ReasonRate = "rate_limited"
	// ReasonCaller: the caller's own streams are all busy and stayed so for
	// the whole wait (HTTP 429).
	ReasonCaller = "too_many_streams"
	// ReasonServer: the process's streams are all busy and stayed so for
	// the whole wait, or too many asks already wait (HTTP 503).
	ReasonServer = "server_busy"
)

// Rejection is an ask refused by admission control.
type Rejection struct {
	Reason  string
	Message string
	// Retry is how long the caller should wait before asking again.
	Retry time.Duration
}

func (r *Rejection) Error() string { return r.Message }

// Config sets the process-wide bounds.
type Config struct {
	// MaxStreams bounds the streams running in the process; 0 means none.
	MaxStreams int
	// MaxWait bounds how long an ask waits for a free slot (its queue
	// stage) before it is refused.
	MaxWait time.Duration
}

// Controller admits asks. It is safe for concurrent use.
type Controller struct {
	cfg    Config
	slots  chan struct{} // nil: no process bound
	now    func() time.Time
	mu     sync.Mutex
	queued int // asks waiting for a process slot
	// callers holds each caller's bucket and counters; idle entries are
	// swept so that many distinct callers cannot grow it without bound.
	callers   map[string]*caller
	lastSweep time.Time
	rejected  map[string]int64 // by reason
}

type caller struct {
	limits  Limits
	bucket  *rate.Limiter // nil: no rate limit
	slots   chan struct{} // nil: no per-caller bound
	waiting int
	active  int
	used    time.Time
}

// New returns a Controller; it reports a negative bound as an error.
func New(cfg Config) (*Controller, error) {
	if cfg.MaxStreams < 0 {
		return nil, fmt.Errorf("admission: the stream bound must be 0 (none) or more, got %d", cfg.MaxStreams)
	}
	if cfg.MaxWait < 0 {
		return nil, fmt.Errorf("admission: the queue wait must be 0 or more, got %s", cfg.MaxWait)
	}
	c := &Controller{cfg: cfg, now: time.Now, callers: map[string]*caller{}, rejected: map[string]int64{}}
	if cfg.MaxStreams > 0 {
		c.slots = make(chan struct{}, cfg.MaxStreams)
	}
	return c, nil
}

// MaxStreams is the process bound (0: none).
func (c *Controller) MaxStreams() int { return c.cfg.MaxStreams }

// Ticket is an admitted ask's hold on its slots; Release gives them back.
type Ticket struct {
	c      *Controller
	caller *caller
	once   sync.Once
}

// Release frees the ask's slots. It is safe to call more than once.
func (t *Ticket) Release() {
	t.once.Do(func() {
		if t.c.slots != nil {
			<-t.c.slots
		}
		t.c.mu.Lock()
		defer t.c.mu.Unlock()
		if t.caller.slots != nil {
			<-t.caller.slots
		}
		t.caller.active--
		t.caller.used = t.c.now()
	})
}

// Admit takes a token from the caller's bucket, then waits at most MaxWait
// for one of the caller's slots and one of the process's. It returns a
// *Rejection when the ask must be refused, or ctx's error when the caller
// went away while waiting.
func (c *Controller) Admit(ctx context.Context, who Caller) (*Ticket, error) {
	t, err := c.admit(ctx, who)
	var rej *Rejection
	if errors.As(err, &rej) {
		c.mu.Lock()
		c.rejected[rej.Reason]++
		c.mu.Unlock()
	}
	return t, err
}

func (c *Controller) admit(ctx context.Context, who Caller) (*Ticket, error) {
	deadline := c.now().Add(c.cfg.MaxWait)
	c.mu.Lock()
	cl := c.callerLocked(who)
	if cl.bucket != nil {
		r := cl.bucket.ReserveN(c.now(), 1)
		if d := r.DelayFrom(c.now()); d > 0 {
			r.CancelAt(c.now())
			c.mu.Unlock()
			return nil, &Rejection{Reason: ReasonRate, Retry: d,
				Message: fmt.Sprintf("more than %s asks from this caller", cl.limits.Rate)}
		}
	}
	full, err := c.takeLocked(ctx, cl.slots, &cl.waiting, deadline)
	if full {
		c.mu.Unlock()
		return nil, c.busyCaller(cl)
	}
	if err != nil {
		cl.used = c.now()
		c.mu.Unlock()
		if errors.Is(err, errWaitedOut) {
			return nil, c.busyCaller(cl)
		}
		return nil, err
	}
	cl.active++
	full, err = c.takeLocked(ctx, c.slots, &c.queued, deadline)
	if full {
		c.releaseCallerLocked(cl)
		c.mu.Unlock()
		return nil, c.busyServer()
	}
	if err != nil {
		c.releaseCallerLocked(cl)
		c.mu.Unlock()
		if errors.Is(err, errWaitedOut) {
			return nil, c.busyServer()
		}
		return nil, err
	}
	c.mu.Unlock()
	return &Ticket{c: c, caller: cl}, nil
}

func (c *Controller) releaseCallerLocked(cl *caller) {
	if cl.slots != nil {
		<-cl.slots
	}
	cl.active--
	cl.used = c.now()
}

var errWaitedOut = errors.New("waited out")

// takeLocked takes a slot of sem (nil: none needed) for an ask, with c.mu
// held on entry and on return: at once when one is free; else, when fewer
// asks than sem has slots already wait (*waiting counts them), by waiting
// for one until deadline with c.mu released; else it reports full, for
// beyond that a wait is hopeless and refusing at once keeps the waiting
// bounded. An ask that took a free slot is never counted as waiting: an ask
// checking the queue meanwhile is not refused for a queue that is empty.
func (c *Controller) takeLocked(ctx context.Context, sem chan struct{}, waiting *int, deadline time.Time) (full bool, err error) {
	if sem == nil {
		return false, nil
	}
	select {
	case sem <- struct{}{}:
		return false, nil
	default:
	}
	if *waiting >= cap(sem) {
		return true, nil
	}
	*waiting++
	c.mu.Unlock()
	err = c.wait(ctx, sem, deadline)
	c.mu.Lock()
	*waiting--
	return false, err
}

// wait takes a slot of sem before deadline.
func (c *Controller) wait(ctx context.Context, sem chan struct{}, deadline time.Time) error {
	d := deadline.Sub(c.now())
	if d <= 0 {
		return errWaitedOut
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case sem <- struct{}{}:
		return nil
	case <-timer.C:
		return errWaitedOut
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryBusy is the Retry-After of a refusal for lack of a slot: streams
// end within seconds, and a wait of the queue's length was already spent.
const retryBusy = time.Second

func (c *Controller) busyCaller(cl *caller) *Rejection {
	return &Rejection{Reason: ReasonCaller, Retry: retryBusy,
		Message: fmt.Sprintf("this caller already has %d streams open; close one or wait", cap(cl.slots))}
}

func (c *Controller) busyServer() *Rejection {
	return &Rejection{Reason: ReasonServer, Retry: retryBusy,
		Message: fmt.Sprintf("the server is answering its limit of %d streams; try again shortly", c.cfg.MaxStreams)}
}

// idleAfter is how long a caller with nothing running is remembered. A
// bucket refills in at most ten seconds (its burst), so after a minute a
// forgotten caller starts exactly as a remembered one would.
const idleAfter = time.Minute

// callerLocked returns who's state, creating it or updating its limits.
func (c *Controller) callerLocked(who Caller) *caller {
	now := c.now()
	if now.Sub(c.lastSweep) > idleAfter {
		c.lastSweep = now
		for id, cl := range c.callers {
			if cl.active == 0 && cl.waiting == 0 && now.Sub(cl.used) > idleAfter {
				delete(c.callers, id)
			}
		}
	}
	cl := c.callers[who.ID]
	// New limits (a key's changed) apply once the caller is idle: its open
	// streams' tickets hold slots of the old bound.
	if cl == nil || (cl.limits != who.Limits && cl.active == 0 && cl.waiting == 0) {
		cl = &caller{limits: who.Limits}
		cl.bucket = limiter(who.Limits.Rate)
		if who.Limits.Concurrent > 0 {
			cl.slots = make(chan struct{}, who.Limits.Concurrent)
		}
		c.callers[who.ID] = cl
	}
	cl.used = now
	return cl
}

// Stats is a snapshot for metrics and tests.
type Stats struct {
	Callers int // callers remembered
	Queued  int // asks waiting for a process slot
	Running int // process slots taken
	// Rejected counts refusals since New by reason (ReasonRate, ...).
	Rejected map[string]int64
}

// Reasons lists every refusal reason, for metrics.
var Reasons = []string{ReasonRate, ReasonCaller, ReasonServer}

// Stats returns the current counts.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Callers: len(c.callers), Queued: c.queued, Rejected: maps.Clone(c.rejected)}
	if c.slots != nil {
		st.Running = len(c.slots)
	}
	return st
}
