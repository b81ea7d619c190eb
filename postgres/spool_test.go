package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"ragtime"
	"ragtime/internal/spool"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

func openSpool(t *testing.T, dir string) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(dir, spool.Options{SegmentBytes: 64 << 10, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	return sp
}

// TestRecorderSpoolsBeyondTheQueue cuts PostgreSQL away for long enough to
// overflow the memory queue twenty times: nothing is dropped, the records
// go to the spool, and once PostgreSQL is back the spool drains into it and
// the recorder goes back to its memory queue.
func TestRecorderSpoolsBeyondTheQueue(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	u, proxy, pool := proxiedPool(t)
	sp := openSpool(t, t.TempDir())
	var logs bytes.Buffer
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
		QueueSize: 50, BatchSize: 16, FlushInterval: time.Millisecond, RetryBackoff: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Spool: sp,
	})

	want := map[string]ragtime.Record{}
	add := func(from, to int) {
		for i := from; i < to; i++ {
			r := record(i)
			want[r.QueryID] = r
			rec.Record(r)
		}
	}
	add(0, 40)
	waitFor(t, "the first records", func() bool { return rec.Stats().Written == 40 })

	proxy.Cut()
	add(40, 1040)
	st := rec.Stats()
	if st.Dropped != 0 || st.Failed != 0 || !st.Spooling || st.Spool.Records+st.Queued < 900 {
		t.Fatalf("during the outage Stats = %+v, want nothing dropped, most spooled", st)
	}
	if st.Spool.Bytes == 0 || st.Spool.OldestAgeSeconds < 0 {
		t.Errorf("spool stats %+v", st.Spool)
	}
	waitFor(t, "retries while PostgreSQL is away", func() bool { return rec.Stats().Retries >= 2 })
	direct, err := postgres.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if n := countRows(t, direct, "queries"); n != 40 {
		t.Fatalf("%d rows while cut, want 40", n)
	}
	proxy.Restore()
	waitFor(t, "the spool to drain", func() bool { st := rec.Stats(); return st.Written == 1040 && !st.Spooling })
	add(1040, 1050) // back on the memory queue
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st = rec.Stats()
	if st.Dropped != 0 || st.Failed != 0 || st.Written != 1050 || st.Spool.Records != 0 || st.Spool.Bytes != 0 {
		t.Errorf("Stats = %+v, want 1050 written, an empty spool", st)
	}
	if st.Spooled < 900 || st.Replayed != st.Spooled {
		t.Errorf("spooled %d, replayed %d", st.Spooled, st.Replayed)
	}
	if n := countRows(t, pool, "queries"); n != 1050 {
		t.Fatalf("queries rows = %d, want 1050", n)
	}
	if n := countRows(t, pool, "query_stages"); n != 1050*8 {
		t.Fatalf("query_stages rows = %d, want %d", n, 1050*8)
	}
	store := postgres.NewStore(pool)
	n := 0
	for id, w := range want {
		if n++; n%50 != 0 {
			continue
		}
		got, err := store.GetQuery(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		equalRecords(t, got, w)
	}
	for _, line := range []string{"spooling finished queries to disk", "spool drained into PostgreSQL"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no log line %q:\n%s", line, logs.String())
		}
	}
}

// TestRecorderReplaysSpoolLeftByCrash starts a recorder on a spool a
// previous process left: one record already stored (replayed twice after a
// crash between commit and removal), one corrupted on disk. Every intact
// record is stored once; the corrupt one is named in the log and counted.
func TestRecorderReplaysSpoolLeftByCrash(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	dir := t.TempDir()

	stored := record(0)
	first := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	first.Record(stored)
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	sp, err := spool.Open(dir, spool.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var left []ragtime.Record
	for i := 1; i <= 30; i++ {
		left = append(left, record(i))
	}
	victim := left[11]
	for _, r := range append([]ragtime.Record{stored}, left...) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.Append(b, r.CreatedAt); err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte(victim.QueryID))
	data[at] ^= 0x01
	if err := os.WriteFile(segs[0], data, 0o600); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	sp2, err := spool.Open(dir, spool.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: time.Millisecond, Logger: log, Spool: sp2})
	waitFor(t, "the spool to drain", func() bool { return !rec.Stats().Spooling })
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := rec.Stats()
	if st.Spool.Corrupt != 1 || st.Spool.Records != 0 || st.Failed != 0 || st.Dropped != 0 {
		t.Errorf("Stats = %+v, want 1 corrupt record skipped, an empty spool", st)
	}
	if n := countRows(t, pool, "queries"); n != 30 {
		t.Errorf("queries rows = %d, want 30 (1 stored before + 29 intact)", n)
	}
	if n := countRows(t, pool, "query_stages"); n != 30*8 {
		t.Errorf("query_stages rows = %d, want %d (the replayed duplicate adds none)", n, 30*8)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM queries WHERE id = $1", victim.QueryID).Scan(&n); err != nil || n != 0 {
		t.Errorf("the corrupt record: %d rows (%v)", n, err)
	}
	if !strings.Contains(logs.String(), "corrupt record skipped") || !strings.Contains(logs.String(), filepath.Base(segs[0])) {
		t.Errorf("the corrupt record is not named in the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "from a previous run") {
		t.Errorf("no log line about the spool left by a previous run:\n%s", logs.String())
	}
}

// TestRecorderCloseSpoolsWhatIsLeft closes while PostgreSQL is away: with
// a spool nothing is dropped; the next recorder writes it all.
func TestRecorderCloseSpoolsWhatIsLeft(t *testing.T) {
	t.Parallel()
	_, proxy, pool := proxiedPool(t)
	dir := t.TempDir()
	sp, err := spool.Open(dir, spool.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: time.Hour, Logger: quietLogger(), Spool: sp})
	proxy.Cut()
	for i := range 7 {
		rec.Record(record(i))
	}
	cctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := rec.Close(cctx); err != nil {
		t.Errorf("Close = %v, want nothing lost", err)
	}
	if st := rec.Stats(); st.Dropped != 0 || st.Spool.Records != 7 {
		t.Errorf("Stats = %+v, want 7 spooled, none dropped", st)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}

	proxy.Restore()
	sp2 := openSpool(t, dir)
	rec2 := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger(), Spool: sp2})
	waitFor(t, "the spool to drain", func() bool { return rec2.Stats().Written == 7 })
	if err := rec2.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, "queries"); n != 7 {
		t.Errorf("queries rows = %d, want 7", n)
	}
}

// TestRecorderQueueFullSpoolsTheQueueAtOnce fills the memory queue while
// the writer is between flushes: the record that finds it full moves the
// whole queue to the spool with it, so a process killed at that moment
// (kill -9 during an outage) loses none of the queries it already answered.
func TestRecorderQueueFullSpoolsTheQueueAtOnce(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	_, proxy, pool := proxiedPool(t)
	sp := openSpool(t, t.TempDir())
	proxy.Cut() // nothing is written or replayed meanwhile
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
		QueueSize: 10, BatchSize: 100, FlushInterval: time.Hour, RetryBackoff: time.Hour,
		Logger: quietLogger(), Spool: sp,
	})
	for i := range 11 {
		rec.Record(record(i))
	}
	if st := rec.Stats(); st.Spool.Records != 11 || st.Queued != 0 || !st.Spooling || st.Dropped != 0 {
		t.Errorf("after overflowing the queue Stats = %+v, want all 11 in the spool and none queued", st)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = rec.Close(cctx)
}
