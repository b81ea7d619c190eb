package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// stallWrites holds query_rollups locked in a transaction of its own, so
// that every batch write waits at its roll-up upsert (its COPYs done,
// uncommitted) until the returned release is called.
func stallWrites(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	ctx := ctxFor(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE query_rollups IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			if err := tx.Rollback(ctx); err != nil {
				t.Errorf("release the roll-ups: %v", err)
			}
		}
	}
	t.Cleanup(release)
	return release
}

// stallThenKill records recs with the writer stalled: the first batch
// (exactly batch records: the writer wakes only for a full batch) is taken
// and its write waits at the roll-ups; the rest is recorded and the writer
// takes its next batch behind the stalled one. Then it ends the stalled
// write's backend, as PostgreSQL going away under it would: the write fails
// for a reason other than its data, with the next batch taken and encoded.
func stallThenKill(t *testing.T, pool *pgxpool.Pool, rec *postgres.Recorder, batch, n int) []string {
	t.Helper()
	ctx := ctxFor(t)
	ids := make([]string, n)
	stalled := func() int {
		var k int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO query_rollups%'`).Scan(&k); err != nil {
			t.Fatal(err)
		}
		return k
	}
	for i := range n {
		if i == batch {
			waitFor(t, "the first batch stalled at the roll-ups", func() bool { return rec.InFlight() == batch && stalled() == 1 })
		}
		r := record(i)
		ids[i] = r.QueryID
		rec.Record(r)
	}
	waitFor(t, "the next batch taken behind the stalled one", func() bool { return rec.InFlight() > batch })
	var killed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO query_rollups%') k`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("ended %d stalled writes, want 1", killed)
	}
	return ids
}

// assertWrittenInOrder checks that queries holds each of ids once, with
// their stages, and that they were committed in the order of ids: each
// transaction's id (xmin) is at least the one before's.
func assertWrittenInOrder(t *testing.T, pool *pgxpool.Pool, ids []string) {
	t.Helper()
	ctx := ctxFor(t)
	rows, err := pool.Query(ctx, "SELECT id::text, xmin::text::bigint FROM queries")
	if err != nil {
		t.Fatal(err)
	}
	xid := map[string]int64{}
	for rows.Next() {
		var id string
		var x int64
		if err := rows.Scan(&id, &x); err != nil {
			t.Fatal(err)
		}
		if _, dup := xid[id]; dup {
			t.Fatalf("query %s stored twice", id)
		}
		xid[id] = x
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(xid) != len(ids) {
		t.Fatalf("%d queries stored, want %d", len(xid), len(ids))
	}
	if n := countRows(t, pool, "query_stages"); n != len(ids)*8 {
		t.Fatalf("query_stages rows = %d, want %d", n, len(ids)*8)
	}
	for i, id := range ids {
		x, ok := xid[id]
		if !ok {
			t.Fatalf("record %d (%s) not stored", i, id)
		}
		if i > 0 && x < xid[ids[i-1]] {
			t.Fatalf("record %d committed in transaction %d, before record %d's (%d): written out of order", i, x, i-1, xid[ids[i-1]])
		}
	}
}

// TestRecorderFailureWithNextBatchTakenSpoolsInOrder makes a batch write
// fail (its backend ended) while the writer holds the next batch, taken
// and encoded behind it: the failed batch, then that next batch, then the
// queue go to the spool, oldest first, and the replayer stores every record
// once, in the order recorded.
func TestRecorderFailureWithNextBatchTakenSpoolsInOrder(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	sp := openSpool(t, t.TempDir())
	release := stallWrites(t, pool)
	const batch, n = 16, 400
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
		BatchSize: batch, Writers: 1, FlushInterval: time.Hour, RetryBackoff: 20 * time.Millisecond,
		Logger: quietLogger(), Spool: sp,
	})
	ids := stallThenKill(t, pool, rec, batch, n)
	waitFor(t, "every record in the spool", func() bool { return rec.Stats().Spooled == n })
	if st := rec.Stats(); st.Written != 0 || st.Dropped != 0 || st.Failed != 0 || !st.Spooling {
		t.Fatalf("after the failure Stats = %+v, want all %d spooled, none written, dropped or failed", st, n)
	}
	release()
	waitFor(t, "the spool to drain", func() bool { st := rec.Stats(); return st.Written == n && !st.Spooling })
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Replayed != n || st.Dropped != 0 || st.Failed != 0 || st.Spool.Records != 0 {
		t.Errorf("Stats = %+v, want %d replayed, an empty spool", st, n)
	}
	assertWrittenInOrder(t, pool, ids)
}

// TestRecorderFailureWithNextBatchTakenRetriesInOrder is the same failure
// without a spool: the writer retries the failed batch and writes the one
// it took behind it only after, so every record is stored once and in the
// order recorded.
func TestRecorderFailureWithNextBatchTakenRetriesInOrder(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	release := stallWrites(t, pool)
	const batch, n = 16, 400
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
		BatchSize: batch, Writers: 1, FlushInterval: time.Hour, RetryBackoff: 20 * time.Millisecond,
		Logger: quietLogger(),
	})
	ids := stallThenKill(t, pool, rec, batch, n)
	waitFor(t, "a retry", func() bool { return rec.Stats().Retries >= 1 })
	if st := rec.Stats(); st.Written != 0 || st.Queued != n {
		t.Fatalf("while stalled Stats = %+v, want none written, %d queued", st, n)
	}
	release()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != n || st.Dropped != 0 || st.Failed != 0 || st.Queued != 0 {
		t.Errorf("Stats = %+v, want %d written", st, n)
	}
	assertWrittenInOrder(t, pool, ids)
}
