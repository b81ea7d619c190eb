package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"ragtime/auth"
)

// scriptedShared answers Admit from a script of grants (then everything
// taken), recording each ask; err, when set, fails every call.
type scriptedShared struct {
	mu       sync.Mutex
	asks     []SharedAsk
	grants   []SharedGrant
	err      error
	released int
}

func (s *scriptedShared) Take(context.Context, string, auth.Rate, int) (time.Duration, error) {
	return 0, errors.New("not used")
}

func (s *scriptedShared) Lease(context.Context, string, int) (func(), error) {
	return nil, errors.New("not used")
}

func (s *scriptedShared) Admit(_ context.Context, ask SharedAsk) (SharedGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asks = append(s.asks, ask)
	if s.err != nil {
		return SharedGrant{}, s.err
	}
	if len(s.grants) > 0 {
		g := s.grants[0]
		s.grants = s.grants[1:]
		return g, nil
	}
	return SharedGrant{Full: -1, Release: func() { s.mu.Lock(); s.released++; s.mu.Unlock() }}, nil
}

// With Shared an ask's admission is one call carrying its rate and both
// leases; a full lease is polled without charging the bucket again; a
// failing Shared falls back to the process's bucket, never failing the ask.
func TestSharedAdmissionIsOneCall(t *testing.T) {
	t.Parallel()
	sh := &scriptedShared{}
	c := mustNew(t, Config{MaxStreams: 4, MaxWait: time.Second, Backend: "m", BackendStreams: 8, Shared: sh})
	who := Caller{ID: "key:k", Limits: Limits{Concurrent: 2, Rate: auth.Rate{N: 6, Per: time.Minute}}}
	tk, err := c.Admit(context.Background(), who)
	if err != nil {
		t.Fatal(err)
	}
	if _, calls := tk.Shared(); calls != 1 || len(sh.asks) != 1 {
		t.Fatalf("%d calls to Shared for one ask, want 1", len(sh.asks))
	}
	a := sh.asks[0]
	if a.RateKey != "key:k" || a.Rate != who.Limits.Rate || a.Burst != 1 || len(a.Leases) != 2 ||
		a.Leases[0] != (SharedLease{Key: "streams:key:k", Limit: 2}) || a.Leases[1] != (SharedLease{Key: "backend:m", Limit: 8}) {
		t.Fatalf("the ask sent to Shared: %+v", a)
	}
	tk.Release()
	if sh.released != 1 {
		t.Errorf("released %d times, want once", sh.released)
	}

	// The caller's leases are all held at first: polled, rate not charged again.
	sh.asks = nil
	sh.grants = []SharedGrant{{Full: 0}, {Full: 0}}
	tk, err = c.Admit(context.Background(), who)
	if err != nil {
		t.Fatal(err)
	}
	tk.Release()
	if len(sh.asks) != 3 || sh.asks[0].Rate.N == 0 || sh.asks[1].Rate.N != 0 || sh.asks[2].Rate.N != 0 {
		t.Fatalf("asks while a lease was full: %+v, want the rate in the first only", sh.asks)
	}

	// Refused by the shared bucket.
	sh.grants = []SharedGrant{{Retry: 3 * time.Second, Full: -1}}
	_, err = c.Admit(context.Background(), who)
	if r := rejection(t, err, ReasonRate); r.Retry != 3*time.Second {
		t.Errorf("Retry %v, want the shared bucket's 3s", r.Retry)
	}

	// Shared fails: the process's own bucket (6/min, a burst of one).
	sh.err = errors.New("redis is unavailable")
	tk, err = c.Admit(context.Background(), who)
	if err != nil {
		t.Fatalf("the first ask while Shared fails: %v", err)
	}
	tk.Release()
	_, err = c.Admit(context.Background(), who)
	rejection(t, err, ReasonRate)
}

// A lease that stays full past the wait refuses the ask for that lease's
// bound, and an ask refused by the process's own slots gives its leases back.
func TestSharedLeaseWaitAndGiveBack(t *testing.T) {
	t.Parallel()
	sh := &scriptedShared{}
	for range 100 {
		sh.grants = append(sh.grants, SharedGrant{Full: 1})
	}
	c := mustNew(t, Config{MaxStreams: 1, MaxWait: 30 * time.Millisecond, Backend: "m", BackendStreams: 8, Shared: sh})
	who := Caller{ID: "key:k", Limits: Limits{Concurrent: 2}}
	_, err := c.Admit(context.Background(), who)
	if r := rejection(t, err, ReasonServer); r.Message == "" {
		t.Error("no message")
	}
	sh.grants = nil
	held, err := c.Admit(context.Background(), who)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Admit(context.Background(), who) // the process's one slot is held
	rejection(t, err, ReasonServer)
	if sh.released != 1 {
		t.Errorf("an ask refused for the process's slot gave back %d grants, want its 1", sh.released)
	}
	held.Release()
	if sh.released != 2 {
		t.Errorf("released %d, want 2", sh.released)
	}
}
