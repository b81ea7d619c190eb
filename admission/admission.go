package admission

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

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
	// Backend names the model backend (for its lease key) and
	// BackendStreams bounds the streams it answers at once: across
	// replicas with Shared, in the process without (or while Shared is
	// unavailable); 0 means no bound.
	Backend        string
	BackendStreams int
	// Shared, when set, counts each caller's rate and streams and the
	// backend's streams across replicas (redisstate.Store). The process's
	// own bound (MaxStreams) is always its own.
	Shared Shared
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
	// rates holds the callers' buckets in the process: all of them
	// without Shared, the fallback while Shared is unavailable.
	rates *LocalRates
	// backend bounds the backend's streams in the process (nil: no
	// bound); backendQueued counts the asks waiting for one.
	backend       chan struct{}
	backendQueued int
}

type caller struct {
	limits  Limits
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
	if cfg.BackendStreams < 0 {
		return nil, fmt.Errorf("admission: the backend's stream bound must be 0 (none) or more, got %d", cfg.BackendStreams)
	}
	c := &Controller{cfg: cfg, now: time.Now, callers: map[string]*caller{}, rejected: map[string]int64{}, rates: NewLocalRates()}
	c.rates.now = func() time.Time { return c.now() }
	if cfg.MaxStreams > 0 {
		c.slots = make(chan struct{}, cfg.MaxStreams)
	}
	if cfg.BackendStreams > 0 {
		c.backend = make(chan struct{}, cfg.BackendStreams)
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
	// leases are the shared leases held (Shared.Lease's releases).
	leases []func()
	// shared is the time spent in calls to Shared, calls their number.
	shared time.Duration
	calls  int
}

// Shared is the time the ask's admission spent in round trips to the
// shared state, and their number (0 without Shared).
func (t *Ticket) Shared() (time.Duration, int) { return t.shared, t.calls }

// Release frees the ask's slots. It is safe to call more than once.
func (t *Ticket) Release() {
	t.once.Do(func() {
		for _, release := range t.leases {
			release()
		}
		if t.c.slots != nil {
			<-t.c.slots
		}
		if t.c.backend != nil {
			<-t.c.backend
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
	t := &Ticket{c: c}
	if rej, err := c.admitShared(ctx, t, who, deadline); rej != nil || err != nil {
		if rej != nil {
			return nil, rej
		}
		return nil, err
	}
	// The process's own slots, after the shared leases: those bound the
	// ask in this process whatever Redis says, and are what is left when
	// it is unavailable.
	c.mu.Lock()
	cl := c.callerLocked(who)
	t.caller = cl
	full, err := c.takeLocked(ctx, cl.slots, &cl.waiting, deadline)
	if full || err != nil {
		if err != nil {
			cl.used = c.now()
		}
		c.mu.Unlock()
		t.releaseLeases()
		if full || errors.Is(err, errWaitedOut) {
			return nil, c.busyCaller(cl)
		}
		return nil, err
	}
	cl.active++
	full, err = c.takeLocked(ctx, c.slots, &c.queued, deadline)
	if full || err != nil {
		c.releaseCallerLocked(cl)
		c.mu.Unlock()
		t.releaseLeases()
		if full || errors.Is(err, errWaitedOut) {
			return nil, c.busyServer()
		}
		return nil, err
	}
	full, err = c.takeLocked(ctx, c.backend, &c.backendQueued, deadline)
	if full || err != nil {
		c.releaseCallerLocked(cl)
		if c.slots != nil {
			<-c.slots
		}
		c.mu.Unlock()
		t.releaseLeases()
		if full || errors.Is(err, errWaitedOut) {
			return nil, c.busyBackend()
		}
		return nil, err
	}
	c.mu.Unlock()
	return t, nil
}

// admitShared takes who's ask from its bucket and its shared leases (its
// streams', the backend's): with Shared in one round trip (Shared.Admit)
// when none is full, then polling for the full ones until deadline (the
// wait is the ask's queue stage, as for a local slot); without Shared, or
// when it fails, the ask is taken from the process's own bucket and the
// process's slots stand in for the leases. It returns the rejection of an
// ask refused, or ctx's error.
func (c *Controller) admitShared(ctx context.Context, t *Ticket, who Caller, deadline time.Time) (*Rejection, error) {
	r := who.Limits.Rate
	if r.N <= 0 || r.Per <= 0 {
		r = auth.Rate{}
	}
	rateRefused := func(d time.Duration) *Rejection {
		return &Rejection{Reason: ReasonRate, Retry: d, Message: fmt.Sprintf("more than %s asks from this caller", r)}
	}
	burst := Burst(r)
	if c.cfg.Shared == nil {
		if r.N > 0 {
			if d, _ := c.rates.Take(ctx, who.ID, r, burst); d > 0 {
				return rateRefused(d), nil
			}
		}
		return nil, nil
	}
	ask := SharedAsk{RateKey: who.ID, Rate: r, Burst: burst}
	var busy []func() *Rejection
	if n := who.Limits.Concurrent; n > 0 {
		ask.Leases = append(ask.Leases, SharedLease{Key: "streams:" + who.ID, Limit: n})
		busy = append(busy, func() *Rejection { return busyCallerN(n) })
	}
	if c.cfg.BackendStreams > 0 {
		ask.Leases = append(ask.Leases, SharedLease{Key: "backend:" + c.cfg.Backend, Limit: c.cfg.BackendStreams})
		busy = append(busy, c.busyBackend)
	}
	if r.N == 0 && len(ask.Leases) == 0 {
		return nil, nil
	}
	poll := 5 * time.Millisecond
	for {
		start := time.Now()
		g, err := c.cfg.Shared.Admit(ctx, ask)
		t.shared += time.Since(start)
		t.calls++
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			// Shared is unavailable: the process's bucket (unless the ask
			// was taken from the shared one already) and slots stand in.
			if ask.Rate.N > 0 {
				if d, _ := c.rates.Take(ctx, who.ID, r, burst); d > 0 {
					return rateRefused(d), nil
				}
			}
			return nil, nil
		case g.Retry > 0:
			return rateRefused(g.Retry), nil
		case g.Full < 0 || g.Full >= len(busy):
			if g.Release != nil {
				t.leases = append(t.leases, g.Release)
			}
			return nil, nil
		}
		// Taken from the bucket; a lease is full: wait for it without
		// taking another ask from the bucket.
		ask.Rate = auth.Rate{}
		left := time.Until(deadline)
		if left <= 0 {
			return busy[g.Full](), nil
		}
		timer := time.NewTimer(min(poll, left))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
		poll = min(2*poll, 100*time.Millisecond)
	}
}

// releaseLeases gives back the shared leases of an ask refused after
// taking them.
func (t *Ticket) releaseLeases() {
	for _, release := range t.leases {
		release()
	}
	t.leases = nil
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

func (c *Controller) busyCaller(cl *caller) *Rejection { return busyCallerN(cap(cl.slots)) }

func busyCallerN(n int) *Rejection {
	return &Rejection{Reason: ReasonCaller, Retry: retryBusy,
		Message: fmt.Sprintf("this caller already has %d streams open; close one or wait", n)}
}

func (c *Controller) busyBackend() *Rejection {
	return &Rejection{Reason: ReasonServer, Retry: retryBusy,
		Message: fmt.Sprintf("the model backend is answering its limit of %d streams; try again shortly", c.cfg.BackendStreams)}
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
