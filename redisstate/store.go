package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"ragtime/internal/upstream"
)

// ErrUnavailable is returned while the breaker is open: Redis failed within
// the last BreakFor, and is not asked again until then.
var ErrUnavailable = errors.New("redis is unavailable")

// Options shape a Store.
type Options struct {
	// Prefix starts every key, so deployments sharing one Redis do not
	// share state; "" means "ragtime:".
	Prefix string
	// Timeout bounds each round trip (dial, read, write); 0 means 250 ms.
	Timeout time.Duration
	// BreakFor is how long a failure keeps Redis from being asked; 0 means
	// one second.
	BreakFor time.Duration
	// LeaseTTL is how long a lease outlives its replica; leases are renewed
	// every third of it while held. 0 means 15 s.
	LeaseTTL time.Duration
	// Logger gets one warning when Redis becomes unavailable and one line
	// when it answers again; nil discards them.
	Logger *slog.Logger
}

// Store is the shared state in one Redis. It is safe for concurrent use.
type Store struct {
	rdb    *redis.Client
	opts   Options
	log    *slog.Logger
	member string // this process's id, in its leases' members

	down      atomic.Int64 // unix nanos until which Redis is not asked
	mu        sync.Mutex
	failures  map[string]int64 // by concern, for metrics
	unhealthy bool             // the last call failed (for the log's transitions)

	leases sync.Map // *lease → struct{}: held, renewed
	// released are leases given back and not yet sent (Admit sends them
	// with its round trip; relTimer after releaseDelay otherwise).
	relMu     sync.Mutex
	released  []*lease
	relTimer  *time.Timer
	relArmed  bool      // relTimer will fire
	relSince  time.Time // when the oldest of released was queued
	leaseSeq  atomic.Uint64
	streams   *publisher
	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	// scripts run the admission script, the round trip of every ask.
	scripts *scriptConns
}

// Open connects to the Redis at rawURL (redis:// or rediss://, with an
// optional password and database number) and checks that it answers. The
// error never holds the URL's password.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	ro, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url %s: want redis://[:password@]host:port[/db] or rediss://…", upstream.RedactURL(rawURL))
	}
	if opts.Prefix == "" {
		opts.Prefix = "ragtime:"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 250 * time.Millisecond
	}
	if opts.BreakFor <= 0 {
		opts.BreakFor = time.Second
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 15 * time.Second
	}
	ro.DialTimeout, ro.ReadTimeout, ro.WriteTimeout = opts.Timeout, opts.Timeout, opts.Timeout
	ro.PoolTimeout = opts.Timeout
	ro.MaxRetries = -1 // a failed call falls back at once; the breaker decides when to ask again
	ro.ContextTimeoutEnabled = true
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	s := &Store{rdb: redis.NewClient(ro), opts: opts, log: log, member: hex.EncodeToString(id),
		failures: map[string]int64{}, stop: make(chan struct{})}
	pctx, cancel := context.WithTimeout(ctx, 4*opts.Timeout)
	defer cancel()
	if err := s.rdb.Ping(pctx).Err(); err != nil {
		s.rdb.Close()
		return nil, fmt.Errorf("connecting to Redis at --redis-url %s: %w", upstream.RedactURL(rawURL), err)
	}
	s.scripts = newScriptConns(s.rdb.Options(), opts.Timeout)
	s.streams = newPublisher(s)
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.renewLeases() }()
	go func() { defer s.wg.Done(); s.streams.run() }()
	return s, nil
}

// Close stops the renewals and the stream writer (sending what it holds)
// and closes the client. It is safe to call more than once.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.flushReleased()
		s.scripts.close()
		err = s.rdb.Close()
	})
	return err
}

// Prefix is the prefix of every key the store writes.
func (s *Store) Prefix() string { return s.opts.Prefix }

// Concerns whose fallbacks are counted (Failures).
const (
	ConcernRate    = "rate"
	ConcernLeases  = "leases"
	ConcernStreams = "streams"
)

// Failures counts, by concern, the calls that failed or were not made
// while the breaker was open: each one fell back to per-replica state.
func (s *Store) Failures() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.failures)
}

// Available reports whether the breaker is closed.
func (s *Store) Available() bool { return time.Now().UnixNano() >= s.down.Load() }

// ready returns ErrUnavailable, counted for concern, while the breaker is
// open.
func (s *Store) ready(concern string) error {
	if s.Available() {
		return nil
	}
	s.count(concern)
	return ErrUnavailable
}

func (s *Store) count(concern string) {
	s.mu.Lock()
	s.failures[concern]++
	s.mu.Unlock()
}

// done records a call's outcome: a failure (not redis.Nil, not the
// caller's own cancellation) opens the breaker and is logged once until
// Redis answers again.
func (s *Store) done(ctx context.Context, concern string, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		if err == nil {
			s.healthy()
		}
		return err
	}
	if ctx.Err() != nil {
		return err
	}
	s.down.Store(time.Now().Add(s.opts.BreakFor).UnixNano())
	s.mu.Lock()
	s.failures[concern]++
	first := !s.unhealthy
	s.unhealthy = true
	s.mu.Unlock()
	if first {
		s.log.Warn("Redis is unavailable: limits are counted per replica and resumes stay on the replica running the query until it answers again",
			"concern", concern, "err", err)
	}
	return fmt.Errorf("redis (%s): %w", concern, err)
}

func (s *Store) healthy() {
	s.mu.Lock()
	was := s.unhealthy
	s.unhealthy = false
	s.mu.Unlock()
	if was {
		s.log.Info("Redis answers again: limits and resumes are shared across replicas")
	}
}

// key is the prefixed key of parts.
func (s *Store) key(kind, id string) string { return s.opts.Prefix + kind + ":" + id }
