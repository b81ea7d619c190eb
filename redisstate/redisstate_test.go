package redisstate

import (
	"context"
	"fmt"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"ragtime/admission"
	"ragtime/auth"
	"ragtime/postgres/postgrestest"
	"ragtime/redisstate/redistest"
)

func open(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = redistest.Prefix(t, url)
	}
	s, err := Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Two stores (two replicas) take from one bucket: a 60/min rate with its
// burst of ten lets ten asks through in total, not ten each, and says when
// the next one will.
func TestTakeSharesOneBucket(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	a := open(t, url, Options{})
	b := open(t, url, Options{Prefix: a.Prefix()})
	r := auth.Rate{N: 60, Per: time.Minute}
	taken := 0
	var retry time.Duration
	for i := range 30 {
		s := a
		if i%2 == 1 {
			s = b
		}
		d, err := s.Take(context.Background(), "key:k1", r, 10)
		if err != nil {
			t.Fatal(err)
		}
		if d == 0 {
			taken++
		} else {
			retry = d
		}
	}
	if taken != 10 {
		t.Errorf("took %d asks of a 60/min bucket with burst 10 across two stores, want 10", taken)
	}
	if retry <= 0 || retry > time.Second {
		t.Errorf("retry after %s, want within the one second an ask takes to refill", retry)
	}
	// Another key has its own bucket.
	if d, err := b.Take(context.Background(), "key:k2", r, 10); err != nil || d != 0 {
		t.Errorf("another key's first ask: %s, %v", d, err)
	}
}

// Leases are shared: four across two stores, a fifth refused until one is
// given back; a dead store's lease expires with its TTL.
func TestLeasesAreSharedAndExpire(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	a := open(t, url, Options{LeaseTTL: 600 * time.Millisecond})
	b := open(t, url, Options{Prefix: a.Prefix(), LeaseTTL: 600 * time.Millisecond})
	ctx := context.Background()
	var releases []func()
	for i := range 4 {
		s := []*Store{a, b}[i%2]
		rel, err := s.Lease(ctx, "streams:key:k", 4)
		if err != nil || rel == nil {
			t.Fatalf("lease %d: %v, %v", i, rel != nil, err)
		}
		releases = append(releases, rel)
	}
	if rel, err := b.Lease(ctx, "streams:key:k", 4); rel != nil || err != nil {
		t.Fatalf("a fifth of four leases: %v, %v", rel != nil, err)
	}
	// Held leases are renewed past their TTL.
	time.Sleep(900 * time.Millisecond)
	if rel, _ := b.Lease(ctx, "streams:key:k", 4); rel != nil {
		t.Fatal("a held lease expired while renewed")
	}
	releases[0]()
	rel, err := b.Lease(ctx, "streams:key:k", 4)
	if err != nil || rel == nil {
		t.Fatalf("a lease after one was given back: %v", err)
	}
	// a stops renewing (a replica that died): its leases expire.
	a.Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if rel, _ := b.Lease(ctx, "streams:key:k", 4); rel != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a stopped store's leases did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A query published by one store is resumed through another: the events
// after the given sequence, then the rest live, until the end; a finished
// query, an unknown one and another key's are not found.
func TestResumeReplaysAndFollows(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	a := open(t, url, Options{})
	b := open(t, url, Options{Prefix: a.Prefix()})
	add, end := a.Publish("q1", "key1")
	frame := func(i int) []byte {
		return fmt.Appendf(nil, "id: q1:%d\nevent: token\ndata: {\"text\":\"t%d\"}\n\n", i, i)
	}
	for i := range 5 {
		add(i, frame(i))
	}
	waitFor(t, func() bool { n, _ := a.rdb.XLen(context.Background(), a.key("events", "q1")).Result(); return n > 0 })
	if found, _ := b.Resume(context.Background(), "q1", "other", 2, 50*time.Millisecond, nil); found {
		t.Error("another key resumed the query")
	}
	if found, _ := b.Resume(context.Background(), "nope", "key1", 2, 50*time.Millisecond, nil); found {
		t.Error("an unknown query was found")
	}
	var mu sync.Mutex
	var got []int
	done := make(chan error, 1)
	go func() {
		found, err := b.Resume(context.Background(), "q1", "key1", 2, 50*time.Millisecond, func(seq int, f []byte) error {
			if f == nil {
				return nil
			}
			if !strings.Contains(string(f), fmt.Sprintf("q1:%d\n", seq)) {
				return fmt.Errorf("event %d framed as %q", seq, f)
			}
			mu.Lock()
			got = append(got, seq)
			mu.Unlock()
			return nil
		})
		if !found {
			err = fmt.Errorf("not found: %v", err)
		}
		done <- err
	}()
	waitFor(t, func() bool { ok, _ := a.Attached(context.Background(), "q1"); return ok })
	for i := 5; i < 9; i++ {
		add(i, frame(i))
	}
	end()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the follower did not see the end")
	}
	if fmt.Sprint(got) != "[3 4 5 6 7 8]" {
		t.Errorf("resumed events %v, want 3 to 8 once each", got)
	}
	if found, _ := b.Resume(context.Background(), "q1", "key1", 2, 50*time.Millisecond, nil); found {
		t.Error("a finished query was found")
	}
}

// Cut from Redis, calls fail fast (the breaker) and are counted; once it is
// back, they succeed again.
func TestUnavailableFailsFastAndRecovers(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	proxy := postgrestest.NewProxy(t, strings.TrimPrefix(strings.Split(url, "/")[2], ""))
	s := open(t, proxy.URL(url), Options{Prefix: redistest.Prefix(t, url), BreakFor: 200 * time.Millisecond})
	r := auth.Rate{N: 600, Per: time.Minute}
	if _, err := s.Take(context.Background(), "k", r, 100); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	start := time.Now()
	for range 50 {
		if _, err := s.Take(context.Background(), "k", r, 100); err == nil {
			t.Fatal("a call through a cut proxy succeeded")
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("50 calls to a cut Redis took %s: the breaker should fail them at once", d)
	}
	if n := s.Failures()[ConcernRate]; n < 50 {
		t.Errorf("counted %d rate fallbacks, want 50", n)
	}
	proxy.Restore()
	waitFor(t, func() bool { _, err := s.Take(context.Background(), "k", r, 100); return err == nil })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Failed key checks are counted across replicas: with 5 failures a minute
// allowed per address, failures seen by two replicas in turn use up one
// bucket; each replica refuses the address from its first failure past the
// shared bucket on, 7 failures in all (per replica, 5 each: 10). Another
// address is not affected.
func TestFailedKeyChecksAreCountedAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	a := open(t, url, Options{})
	b := open(t, url, Options{Prefix: a.Prefix()})
	r := auth.Rate{N: 5, Per: time.Minute}
	replicas := []*admission.Failures{admission.NewFailures(r, 0).Share(a), admission.NewFailures(r, 0).Share(b)}
	ctx := context.Background()
	now := time.Now()
	const addr = "203.0.113.7"
	failed := 0
	for i := 0; i < 20 && (replicas[0].Wait(addr, now) == 0 || replicas[1].Wait(addr, now) == 0); i++ {
		f := replicas[i%2]
		if f.Wait(addr, now) > 0 {
			continue
		}
		f.Fail(ctx, addr, now)
		failed++
	}
	if failed != 7 {
		t.Errorf("%d failed checks before both replicas refused the address, want 7 (5 shared, then one each)", failed)
	}
	for i, f := range replicas {
		if w := f.Wait(addr, now); w <= 0 || w > 13*time.Second {
			t.Errorf("replica %d: the address waits %s, want the shared bucket's refill (12 s a failure)", i, w)
		}
	}
	if w := replicas[0].Wait("203.0.113.8", now); w != 0 {
		t.Errorf("another address waits %s", w)
	}
}

// Admit takes an ask and its leases in one call, across stores: the
// bucket empties at its burst whoever asks; a full lease takes no other
// lease (all or none) while the ask is still taken from the bucket;
// Release gives every lease back; an empty bucket takes nothing.
func TestAdmitTakesRateAndLeasesAtOnce(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	a := open(t, url, Options{})
	b := open(t, url, Options{Prefix: a.Prefix()})
	ctx := context.Background()
	leases := []admission.SharedLease{{Key: "streams:key:k", Limit: 2}, {Key: "backend:m", Limit: 3}}
	ask := admission.SharedAsk{RateKey: "key:k", Rate: auth.Rate{N: 60, Per: time.Minute}, Burst: 4, Leases: leases}
	var releases []func()
	for i := range 2 {
		g, err := []*Store{a, b}[i].Admit(ctx, ask)
		if err != nil || g.Retry != 0 || g.Full != -1 || g.Release == nil {
			t.Fatalf("ask %d: %+v, %v", i, g, err)
		}
		releases = append(releases, g.Release)
	}
	// The caller's two leases are held: the third ask is taken from the
	// bucket, but takes no backend lease.
	g, err := b.Admit(ctx, ask)
	if err != nil || g.Retry != 0 || g.Full != 0 || g.Release != nil {
		t.Fatalf("an ask past the caller's leases: %+v, %v; want lease 0 full", g, err)
	}
	other := admission.SharedAsk{RateKey: "key:other", Leases: []admission.SharedLease{{Key: "streams:key:other", Limit: 1}, leases[1]}}
	g, err = a.Admit(ctx, other)
	if err != nil || g.Full != -1 || g.Release == nil {
		t.Fatalf("another caller's ask, with two of three backend leases held: %+v, %v", g, err)
	}
	releases = append(releases, g.Release)
	if g, err := a.Admit(ctx, admission.SharedAsk{RateKey: "key:third", Leases: leases[1:]}); err != nil || g.Full != 0 {
		t.Fatalf("a fourth backend lease of three: %+v, %v", g, err)
	}
	for _, release := range releases {
		release()
	}
	// Given back: the fourth ask (the bucket's last) gets both leases.
	g, err = a.Admit(ctx, ask)
	if err != nil || g.Retry != 0 || g.Full != -1 || g.Release == nil {
		t.Fatalf("an ask after the leases were given back: %+v, %v", g, err)
	}
	g.Release()
	// The burst of four is spent: nothing is taken, and the retry is
	// within the second an ask takes to refill.
	g, err = b.Admit(ctx, ask)
	if err != nil || g.Retry <= 0 || g.Retry > time.Second || g.Release != nil {
		t.Fatalf("an ask past the burst: %+v, %v", g, err)
	}
}

// Admit's round trips run on connections of their own: they select the
// URL's database, load the script when Redis has forgotten it (SCRIPT
// FLUSH, a restart), and a connection cut mid-run is dropped, counted as a
// fallback, and replaced once Redis answers again.
func TestAdmitConnections(t *testing.T) {
	t.Parallel()
	u, err := neturl.Parse(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/1"
	url := u.String()
	proxy := postgrestest.NewProxy(t, u.Host)
	s := open(t, proxy.URL(url), Options{Prefix: redistest.Prefix(t, url), BreakFor: 100 * time.Millisecond})
	ctx := context.Background()
	ask := admission.SharedAsk{RateKey: "key:k", Rate: auth.Rate{N: 600, Per: time.Minute}, Burst: 100,
		Leases: []admission.SharedLease{{Key: "streams:key:k", Limit: 2}}}
	g, err := s.Admit(ctx, ask)
	if err != nil || g.Full != -1 || g.Release == nil {
		t.Fatalf("first ask: %+v, %v", g, err)
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	if n, err := c.Exists(ctx, s.key("rate", "key:k"), s.key("lease", "streams:key:k")).Result(); err != nil || n != 2 {
		t.Fatalf("%d of the ask's two keys in database 1 (%v)", n, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g2, err := s.Admit(ctx, ask)
	if err != nil || g2.Full != -1 || g2.Release == nil {
		t.Fatalf("an ask after SCRIPT FLUSH: %+v, %v", g2, err)
	}
	// Both leases of two are held: the third ask finds the lease full.
	if g3, err := s.Admit(ctx, ask); err != nil || g3.Full != 0 {
		t.Fatalf("a third ask: %+v, %v; want the lease full", g3, err)
	}
	proxy.Cut()
	if _, err := s.Admit(ctx, ask); err == nil {
		t.Fatal("an ask through a cut proxy succeeded")
	}
	if n := s.Failures()[ConcernRate]; n < 1 {
		t.Errorf("counted %d rate fallbacks, want at least 1", n)
	}
	proxy.Restore()
	g.Release()
	g2.Release()
	waitFor(t, func() bool { g, err := s.Admit(ctx, ask); return err == nil && g.Full == -1 })
}

// A lease given back goes to Redis with the store's next Admit, or on its
// own when none comes: the other store gets it within waitFor's 5 s
// either way, also when an Admit took the queue (and stopped its timer)
// and a release came after it.
func TestReleaseIsSentWithoutAnotherAsk(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	a := open(t, url, Options{})
	b := open(t, url, Options{Prefix: a.Prefix()})
	ctx := context.Background()
	ask := admission.SharedAsk{RateKey: "key:k", Leases: []admission.SharedLease{{Key: "streams:key:k", Limit: 1}}}
	other := admission.SharedAsk{RateKey: "key:o", Leases: []admission.SharedLease{{Key: "streams:key:o", Limit: 1}}}
	from := func(s *Store) func() bool {
		return func() bool {
			g, err := s.Admit(ctx, ask)
			if err == nil && g.Full == -1 {
				g.Release() // not sent until the next call, or alone
				return true
			}
			return false
		}
	}
	for round := range 3 {
		g, err := a.Admit(ctx, ask)
		if err != nil || g.Full != -1 || g.Release == nil {
			t.Fatalf("round %d: %+v, %v", round, g, err)
		}
		if g, err := b.Admit(ctx, ask); err != nil || g.Full != 0 {
			t.Fatalf("round %d: another store's ask while the lease is held: %+v, %v", round, g, err)
		}
		if round == 1 {
			o, err := a.Admit(ctx, other)
			if err != nil || o.Release == nil {
				t.Fatalf("round %d: %+v, %v", round, o, err)
			}
			o.Release()
			g.Release()
			if _, err := a.Admit(ctx, admission.SharedAsk{RateKey: "key:p"}); err != nil { // takes the queue
				t.Fatal(err)
			}
			g, err = a.Admit(ctx, ask)
			if err != nil || g.Full != -1 || g.Release == nil {
				t.Fatalf("round %d: %+v, %v", round, g, err)
			}
		}
		g.Release()
		waitFor(t, from(b)) // a's release, sent alone
		waitFor(t, from(a)) // b's, sent alone
	}
}

// Asks at once beyond the client's pool size (pool_size=2 here) wait for a
// connection in use and all get through.
func TestAdmitWaitsForABusyConnection(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	s := open(t, url+"?pool_size=2", Options{Prefix: redistest.Prefix(t, url)})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			g, err := s.Admit(ctx, admission.SharedAsk{RateKey: fmt.Sprint("key:", i), Leases: []admission.SharedLease{{Key: "backend:m", Limit: 100}}})
			if err == nil && g.Release != nil {
				g.Release()
			} else if err == nil {
				err = fmt.Errorf("%+v", g)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := cap(s.scripts.inUse); n != 2 {
		t.Errorf("%d connections allowed in use, want the URL's pool_size 2", n)
	}
}

// Admit's own connections authenticate as the URL says: with a user and
// password (an ACL user made for the test and deleted after), a wrong
// password is refused and counted as a fallback, never an admitted ask.
func TestAdmitConnectionsAuthenticate(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opts)
	defer admin.Close()
	ctx := context.Background()
	user := fmt.Sprintf("ragtime-admit-%d", time.Now().UnixNano())
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">s3cret-pass", "~*", "+@all").Err(); err != nil {
		t.Skipf("this Redis cannot make an ACL user (%v)", err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	ask := admission.SharedAsk{RateKey: "key:k", Rate: auth.Rate{N: 600, Per: time.Minute}, Burst: 100,
		Leases: []admission.SharedLease{{Key: "streams:key:k", Limit: 2}}}

	u.User = neturl.UserPassword(user, "s3cret-pass")
	s := open(t, u.String(), Options{Prefix: redistest.Prefix(t, url)})
	g, err := s.Admit(ctx, ask)
	if err != nil || g.Full != -1 || g.Release == nil {
		t.Fatalf("an ask as the ACL user: %+v, %v", g, err)
	}
	// The round trip ran on a connection authenticated as the user (the
	// default user needs no password here, so success alone shows nothing).
	list, err := admin.Do(ctx, "CLIENT", "LIST").Text()
	if err != nil {
		t.Fatal(err)
	}
	var asUser bool
	for _, line := range strings.Split(list, "\n") {
		asUser = asUser || strings.Contains(line, " user="+user+" ") && strings.Contains(line, " cmd=evalsha")
	}
	if !asUser {
		t.Errorf("no connection of user %s ran the admission script:\n%s", user, list)
	}
	g.Release()

	u.User = neturl.UserPassword(user, "wrong")
	bad, err := Open(ctx, u.String(), Options{Prefix: redistest.Prefix(t, url)})
	if err != nil {
		return // refused at open: nothing can be admitted through it
	}
	defer bad.Close()
	if g, err := bad.Admit(ctx, ask); err == nil {
		t.Fatalf("an ask with a wrong password was admitted: %+v", g)
	} else if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the password: %v", err)
	}
}
