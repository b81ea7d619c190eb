package postgres_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// v7At returns a UUIDv7 whose time is at, as pipeline.NewQueryID makes at
// that moment.
func v7At(t *testing.T, at time.Time) string {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[:6], ms[2:])
	return id.String()
}

// utcDay is the start of t's UTC day.
func utcDay(t time.Time) time.Time {
	return t.UTC().Truncate(24 * time.Hour)
}

// partitionOf returns the table holding query id's row.
func partitionOf(t *testing.T, pool *pgxpool.Pool, table, idColumn, id string) string {
	t.Helper()
	var name string
	if err := pool.QueryRow(ctxFor(t), "SELECT DISTINCT tableoid::regclass::text FROM "+table+" WHERE "+idColumn+" = $1", id).Scan(&name); err != nil {
		t.Fatalf("where is %s %s: %v", table, id, err)
	}
	return name
}

// makeDays makes the day partitions of [first, last] by hand (ragtime
// makes them from today on; a test needs past days).
func makeDays(t *testing.T, pool *pgxpool.Pool, first, last time.Time) {
	t.Helper()
	if _, err := pool.Exec(ctxFor(t), "SELECT create_query_partitions($1::date, $2::date)", first.Format(time.DateOnly), last.Format(time.DateOnly)); err != nil {
		t.Fatal(err)
	}
}

func recordAll(t *testing.T, pool *pgxpool.Pool, recs ...ragtime.Record) {
	t.Helper()
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	for _, r := range recs {
		rec.Record(r)
	}
	if err := rec.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != int64(len(recs)) || st.Failed != 0 {
		t.Fatalf("recorder stats %+v, want %d written", st, len(recs))
	}
}

// TestPartitionsAreMadeAhead: the migration makes the day partitions of
// today through PartitionDaysAhead days ahead, calling EnsurePartitions
// again makes nothing, and a recorder remakes a dropped day.
//
// Today is the database's UTC day, read before the migration and again
// after the last check: a run across a UTC midnight (the migration at
// 23:59:59.9 making its day's week, the checks at 00:00:00.1 looking for
// the next day's, and EnsurePartitions rightly making the one day more)
// shows nothing either way, so it runs again, on a fresh database, within
// the new day.
func TestPartitionsAreMadeAhead(t *testing.T) {
	t.Parallel()
	for try := 1; ; try++ {
		failures, crossed := partitionsMadeAhead(t)
		if crossed && try < 2 {
			t.Logf("the run crossed a UTC midnight, again on a fresh database; it found: %q", failures)
			continue
		}
		if crossed {
			t.Errorf("two runs in a row crossed a UTC midnight")
		}
		for _, f := range failures {
			t.Error(f)
		}
		return
	}
}

// partitionsMadeAhead is one run of TestPartitionsAreMadeAhead: what it
// found wrong, and whether the database's UTC day changed from before the
// migration to after the last check (the failures then mean nothing).
func partitionsMadeAhead(t *testing.T) (failures []string, crossedMidnight bool) {
	t.Helper()
	ctx := ctxFor(t)
	pool, err := postgres.Open(ctx, postgrestest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	utcToday := func() time.Time {
		var d time.Time
		if err := pool.QueryRow(ctx, "SELECT (now() AT TIME ZONE 'UTC')::date::timestamp").Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	errorf := func(format string, args ...any) { failures = append(failures, fmt.Sprintf(format, args...)) }
	today := utcToday()
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"queries", "query_stages"} {
		for d := 0; d <= postgres.PartitionDaysAhead; d++ {
			name := table + "_p" + today.AddDate(0, 0, d).Format("20060102")
			var bound string
			err := pool.QueryRow(ctx, `SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c
				JOIN pg_inherits i ON i.inhrelid = c.oid WHERE c.relname = $1 AND i.inhparent = $2::regclass`, name, table).Scan(&bound)
			if err != nil {
				errorf("partition %s of %s: %v", name, table, err)
				continue
			}
			if !strings.Contains(bound, today.AddDate(0, 0, d).Format(time.DateOnly)) {
				errorf("partition %s bound %s, want its day", name, bound)
			}
		}
		var def string
		if err := pool.QueryRow(ctx, `SELECT c.relname FROM pg_class c JOIN pg_inherits i ON i.inhrelid = c.oid
			WHERE i.inhparent = $1::regclass AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'`, table).Scan(&def); err != nil {
			errorf("%s has no default partition: %v", table, err)
		}
	}
	// Calling it again makes nothing; a recorder calls it at start too.
	if made, err := postgres.EnsurePartitions(ctx, pool); err != nil || made != 0 {
		errorf("EnsurePartitions again: made %d, %v; want 0", made, err)
	}
	if _, err := pool.Exec(ctx, "DROP TABLE query_stages_p"+today.AddDate(0, 0, 3).Format("20060102")+", queries_p"+today.AddDate(0, 0, 3).Format("20060102")); err != nil {
		t.Fatal(err)
	}
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	waitFor(t, "the recorder to remake the dropped day", func() bool {
		return countRows(t, pool, "pg_class WHERE relname = 'queries_p"+today.AddDate(0, 0, 3).Format("20060102")+"'") == 1
	})
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return failures, !utcToday().Equal(today)
}

// TestStrayRowLandsInDefault: a query of a day without a partition is
// stored in the default partition, read back, and moved into its day's
// partition when that is made.
func TestStrayRowLandsInDefault(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	ctx := ctxFor(t)
	far := utcDay(time.Now()).AddDate(0, 0, 40).Add(13 * time.Hour)
	r := record(1)
	r.QueryID, r.CreatedAt = v7At(t, far), far
	recordAll(t, pool, r)
	if got := partitionOf(t, pool, "queries", "id", r.QueryID); got != "queries_default" {
		t.Errorf("the stray query is in %s, want queries_default", got)
	}
	if got := partitionOf(t, pool, "query_stages", "query_id", r.QueryID); got != "query_stages_default" {
		t.Errorf("its stages are in %s, want query_stages_default", got)
	}
	got, err := postgres.NewStore(pool).GetQuery(ctx, r.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, r)

	makeDays(t, pool, far, far)
	day := "_p" + far.Format("20060102")
	if got := partitionOf(t, pool, "queries", "id", r.QueryID); got != "queries"+day {
		t.Errorf("after making its day the query is in %s, want queries%s", got, day)
	}
	if got := partitionOf(t, pool, "query_stages", "query_id", r.QueryID); got != "query_stages"+day {
		t.Errorf("after making its day its stages are in %s, want query_stages%s", got, day)
	}
	if n := countRows(t, pool, "queries_default"); n != 0 {
		t.Errorf("%d rows left in queries_default", n)
	}
	if n := countRows(t, pool, "query_stages"); n != len(r.Stages) {
		t.Errorf("%d stages, want %d", n, len(r.Stages))
	}
	got, err = postgres.NewStore(pool).GetQuery(ctx, r.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, r)
}

// TestPruneDropsWholeDays: days wholly before the cutoff are dropped as
// partitions; in the day the cutoff falls in, and in the default
// partition, only the rows before it are deleted.
func TestPruneDropsWholeDays(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	ctx := ctxFor(t)
	d0 := utcDay(time.Now()).AddDate(0, 0, -10)
	makeDays(t, pool, d0, d0.AddDate(0, 0, 2))
	at := func(day int, hour int) ragtime.Record {
		r := record(day*100 + hour)
		r.CreatedAt = d0.AddDate(0, 0, day).Add(time.Duration(hour) * time.Hour)
		r.QueryID = v7At(t, r.CreatedAt)
		return r
	}
	old1, old2 := at(0, 12), at(1, 3)
	early, late := at(2, 6), at(2, 18)
	stray := at(-5, 0) // no partition: in the default one
	recordAll(t, pool, old1, old2, early, late, stray)
	cutoff := d0.AddDate(0, 0, 2).Add(12 * time.Hour)
	searches := postgres.NewSearchRecorder(pool, nil)
	for i, at := range []time.Time{cutoff.Add(-time.Hour), cutoff.Add(-48 * time.Hour), cutoff.Add(time.Hour)} {
		searches.RecordSearch(pipeline.SearchRecord{QueryID: v7At(t, at), CreatedAt: at, QuestionSHA256: fmt.Sprint(i),
			Retrieval: ragtime.RetrievalHybrid, Status: ragtime.StatusOK, Stages: early.Stages})
	}
	searches.Close()
	if n := countRows(t, pool, "searches"); n != 3 {
		t.Fatalf("%d searches stored, want 3", n)
	}

	store := postgres.NewStore(pool)
	q, s, err := store.CountOlder(ctx, cutoff)
	if err != nil || q != 4 || s != int64(4*len(early.Stages)) {
		t.Errorf("CountOlder = %d queries, %d stages, %v; want 4, %d", q, s, err, 4*len(early.Stages))
	}
	res, err := store.Prune(ctx, cutoff, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DroppedDays) != 2 || !res.DroppedDays[0].Equal(d0) || !res.DroppedDays[1].Equal(d0.AddDate(0, 0, 1)) {
		t.Errorf("dropped days %v, want %s and the day after", res.DroppedDays, d0.Format(time.DateOnly))
	}
	if res.Deleted != 2 {
		t.Errorf("deleted %d queries row by row, want 2 (the boundary day's early one and the stray)", res.Deleted)
	}
	if res.Searches != 2 || countRows(t, pool, "searches") != 1 {
		t.Errorf("deleted %d searches, %d left; want 2 and 1", res.Searches, countRows(t, pool, "searches"))
	}
	for _, day := range []time.Time{d0, d0.AddDate(0, 0, 1)} {
		for _, table := range []string{"queries", "query_stages"} {
			if n := countRows(t, pool, "pg_class WHERE relname = '"+table+"_p"+day.Format("20060102")+"'"); n != 0 {
				t.Errorf("%s's partition of %s is still there", table, day.Format(time.DateOnly))
			}
		}
	}
	if n := countRows(t, pool, "queries"); n != 1 {
		t.Errorf("%d queries left, want 1 (the boundary day's late one)", n)
	}
	if n := countRows(t, pool, "query_stages"); n != len(late.Stages) {
		t.Errorf("%d stages left, want %d", n, len(late.Stages))
	}
	got, err := store.GetQuery(ctx, late.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, late)
}

// TestGetQueryReadsOnePartition: a time-ordered id is looked up in the day
// partition its time points at, not in every partition.
func TestGetQueryReadsOnePartition(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	ctx := ctxFor(t)
	d0 := utcDay(time.Now()).AddDate(0, 0, -5)
	makeDays(t, pool, d0, d0.AddDate(0, 0, 4))
	var recs []ragtime.Record
	for i := range 5 {
		r := record(i)
		r.CreatedAt = d0.AddDate(0, 0, i).Add(9 * time.Hour)
		r.QueryID = v7At(t, r.CreatedAt.Add(3*time.Millisecond)) // made just after t0
		recs = append(recs, r)
	}
	recordAll(t, pool, recs...)
	want := recs[2]
	id, _ := uuid.Parse(want.QueryID)
	lo, hi, ok := postgres.IDWindow(id)
	if !ok {
		t.Fatal("a v7 id gave no window")
	}
	pgID := pgtype.UUID{Bytes: id, Valid: true}
	day := want.CreatedAt.Format("20060102")
	explain := func(sql string, args ...any) string {
		rows, err := pool.Query(ctx, "EXPLAIN "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		return strings.Join(lines, "\n")
	}
	for _, c := range []struct {
		table, plan string
	}{
		{"queries", explain(postgres.SelectQuery, pgID, lo, hi)},
		{"query_stages", explain(postgres.SelectStages, pgID, want.CreatedAt)},
	} {
		t.Logf("%s lookup:\n%s", c.table, c.plan)
		if n := strings.Count(c.plan, " on "+c.table+"_"); n != 1 || !strings.Contains(c.plan, " on "+c.table+"_p"+day) {
			t.Errorf("plan of the %s lookup reads %d partitions, want only %s_p%s:\n%s", c.table, n, c.table, day, c.plan)
		}
	}
	got, err := postgres.NewStore(pool).GetQuery(ctx, want.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, want)

	// A v4 id (stored before ids were time-ordered) is still found.
	old := record(9)
	old.CreatedAt = d0.Add(20 * time.Hour)
	recordAll(t, pool, old)
	if got, err = postgres.NewStore(pool).GetQuery(ctx, old.QueryID); err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, old)
}
