package postgres_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"

	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// TestRollupPercentilesWithinOnePercent records a generated, bimodal
// distribution of durations through the recorder (several batches, so the
// roll-up rows are merged by the upsert) and compares every percentile
// read from the roll-ups with the exact one over the raw rows: the error
// must stay within 1 % of the value, the bound the bucket width gives.
func TestRollupPercentilesWithinOnePercent(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	ctx := ctxFor(t)
	rng := rand.New(rand.NewPCG(7, 42))
	start := utcDay(time.Now()).Add(-36 * time.Hour) // in the default partition: partitions do not matter here
	const n = 3000
	recs := make([]pipeline.Record, n)
	for i := range recs {
		r := record(i)
		r.QueryID = uuid.NewString()
		r.CreatedAt = start.Add(time.Duration(i) * 1700 * time.Millisecond) // 85 minutes
		if i%3 == 0 {
			r.Model = "llmsim-70b"
		}
		// Lognormal around 150 ms, and 4 % of queries 7× slower: the
		// head-of-line tail the views exist to show.
		ttft := 150 * math.Exp(0.5*rng.NormFloat64())
		if rng.Float64() < 0.04 {
			ttft *= 7
		}
		r.TTFTMs = &ttft
		r.E2EMs = ttft + 800*rng.Float64()
		r.Stages[0].DurationMs = 0 // queue: zero without a limit
		r.Stages[1].DurationMs = 0.002 + 3*rng.ExpFloat64()
		r.Stages[6].DurationMs = ttft * 0.8
		switch i % 50 {
		case 0:
			r.Status, r.ErrorCode = pipeline.StatusError, "llm_unavailable"
		case 1:
			r.Status = pipeline.StatusCancelled
		}
		recs[i] = r
	}
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{BatchSize: 97, QueueSize: n, Logger: quietLogger()})
	for _, r := range recs {
		rec.Record(r)
	}
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Exact over the raw rows, and read from the hourly and the minute
	// roll-ups, per model and stage (ttft and e2e from queries).
	rows, err := pool.Query(ctx, `
	WITH raw AS (
		SELECT q.model, s.name AS stage, s.duration_ms AS ms FROM query_stages s JOIN queries q ON q.id = s.query_id
		UNION ALL SELECT model, 'ttft', ttft_ms FROM queries WHERE ttft_ms IS NOT NULL
		UNION ALL SELECT model, 'e2e', e2e_ms FROM queries
		UNION ALL SELECT model, 'e2e_' || status, e2e_ms FROM queries WHERE status <> 'ok'),
	exact AS (
		SELECT model, stage, count(*) AS n, max(ms) AS max_ms,
		       percentile_cont(ARRAY[0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999]) WITHIN GROUP (ORDER BY ms) AS p
		FROM raw GROUP BY 1, 2),
	rolled AS (
		SELECT span, model, stage, sum(n)::bigint AS n, max(max_ms) AS max_ms,
		       rollup_percentiles(rollup_hist_sum(hist), ARRAY[0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999]) AS p
		FROM query_rollups GROUP BY 1, 2, 3)
	SELECT r.span, e.model, e.stage, e.n, coalesce(r.n, 0), e.max_ms, r.max_ms, e.p, r.p
	FROM exact e LEFT JOIN rolled r USING (model, stage) ORDER BY 1, 2, 3`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	checked, worst := 0, 0.0
	for rows.Next() {
		var span *string
		var model, stage string
		var en, rn int64
		var emax float64
		var rmax *float64
		var ep, rp []*float64
		if err := rows.Scan(&span, &model, &stage, &en, &rn, &emax, &rmax, &ep, &rp); err != nil {
			t.Fatal(err)
		}
		if span == nil || rn != en || rmax == nil || *rmax != emax {
			t.Errorf("%v %s %s: roll-ups count %d (max %v), raw rows %d (max %v)", span, model, stage, rn, rmax, en, emax)
			continue
		}
		for i := range ep {
			e, r := *ep[i], *rp[i]
			err := math.Abs(r-e) / e
			if e == 0 {
				err = math.Abs(r) // the queue stage: all zero, and 0 reads as 0
			}
			worst = max(worst, err)
			if err > 0.01 {
				t.Errorf("%s %s %s percentile %d: roll-up %.4f ms, exact %.4f ms: error %.3f %%", *span, model, stage, i, r, e, 100*err)
			}
			checked++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 2*2*11*8 {
		t.Errorf("checked %d percentiles, want both spans × both models × 11 stages × 8", checked)
	}
	t.Logf("%d percentiles checked, worst error %.3f %%", checked, 100*worst)
}

// TestRollupBucketMatchesSQL: the recorder's bucket of a duration is
// rollup_bucket's, so roll-ups filled in SQL (rollup_fill) and by the
// recorder agree.
func TestRollupBucketMatchesSQL(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	values := []float64{0, -1, 0.0005, 0.001, 0.00102, 0.0010201, 1, 3.217, 99.9999, 150, 1e6}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		values = append(values, math.Exp(rng.Float64()*20-5))
	}
	var sql []int
	if err := pool.QueryRow(ctxFor(t), "SELECT array_agg(rollup_bucket(v) ORDER BY i) FROM unnest($1::double precision[]) WITH ORDINALITY AS u(v, i)", values).Scan(&sql); err != nil {
		t.Fatal(err)
	}
	for i, v := range values {
		if got := postgres.RollupBucket(v); got != sql[i] {
			t.Errorf("bucket of %v ms: Go %d, SQL %d", v, got, sql[i])
		}
	}
}

// TestRollupFillMatchesRecorder: rollup_fill (what migration 0031 runs on
// queries stored before roll-ups) builds the rows the recorder built.
func TestRollupFillMatchesRecorder(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	ctx := ctxFor(t)
	var recs []pipeline.Record
	for i := range 40 {
		r := record(i)
		if i%4 == 0 {
			r.Status, r.TTFTMs = pipeline.StatusCancelled, nil
		}
		recs = append(recs, r)
	}
	recordAll(t, pool, recs...)
	digest := func() string {
		var d string
		if err := pool.QueryRow(ctx, `SELECT count(*) || ':' || md5(string_agg(r::text, ',' ORDER BY span, start, provider, model, stage))
			FROM (SELECT span, start, provider, model, stage, n, round(sum_ms::numeric, 6), max_ms, hist FROM query_rollups) r`).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	byRecorder := digest()
	if _, err := pool.Exec(ctx, "TRUNCATE query_rollups; SELECT rollup_fill('-infinity', 'infinity')"); err != nil {
		t.Fatal(err)
	}
	if byFill := digest(); byFill != byRecorder {
		t.Errorf("rollup_fill made %s, the recorder %s", byFill, byRecorder)
	}
}

// TestLongWindowsReadRollups: stage_percentiles over more than an hour and
// ttft_tail's earlier hours answer from the roll-ups — within 1 % of the
// exact figures, and the same once the raw rows are gone — while the last
// hour stays exact from the raw rows.
func TestLongWindowsReadRollups(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	ctx := ctxFor(t)
	rng := rand.New(rand.NewPCG(3, 4))
	from := time.Now().Add(-30 * time.Hour).Truncate(time.Hour)
	var recs []pipeline.Record
	for i := range 600 {
		r := record(i)
		r.QueryID = uuid.NewString()
		r.CreatedAt = from.Add(time.Duration(i) * 18 * time.Second) // three hours
		ttft := 100 + 400*rng.Float64()
		r.TTFTMs = &ttft
		r.Stages[6].DurationMs = ttft - 20
		recs = append(recs, r)
	}
	recordAll(t, pool, recs...)

	type row struct {
		stage string
		n     int64
		p50   float64
		p99   float64
	}
	read := func() map[string]row {
		rows, err := pool.Query(ctx, "SELECT stage, n, p50_ms::float8, p99_ms::float8 FROM stage_percentiles($1)", from.Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]row{}
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.stage, &r.n, &r.p50, &r.p99); err != nil {
				t.Fatal(err)
			}
			out[r.stage] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	var exactP50, exactP99 float64
	if err := pool.QueryRow(ctx, `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms)
		FROM query_stages WHERE name = 'llm_prefill'`).Scan(&exactP50, &exactP99); err != nil {
		t.Fatal(err)
	}
	before := read()
	prefill := before["llm_prefill"]
	if len(before) != 8 || prefill.n != 600 {
		t.Fatalf("stage_percentiles over 30 hours: %+v, want 8 stages, 600 llm_prefill", before)
	}
	for _, c := range []struct{ got, want float64 }{{prefill.p50, exactP50}, {prefill.p99, exactP99}} {
		if math.Abs(c.got-c.want)/c.want > 0.01 {
			t.Errorf("llm_prefill from the roll-ups %.3f ms, exact %.3f ms: off by more than 1 %%", c.got, c.want)
		}
	}
	var tailHours int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM ttft_tail WHERE hour >= $1 AND answered > 0 AND ttft_p99_ms IS NOT NULL", from).Scan(&tailHours); err != nil || tailHours != 3 {
		t.Errorf("ttft_tail has %d hours with a tail, %v; want 3", tailHours, err)
	}

	// Without the raw rows the long window reads the same; the last hour
	// (exact, from the raw rows) has nothing.
	if _, err := pool.Exec(ctx, "TRUNCATE queries, query_stages"); err != nil {
		t.Fatal(err)
	}
	if after := read(); after["llm_prefill"] != prefill || len(after) != len(before) {
		t.Errorf("without raw rows stage_percentiles reads %+v, want %+v", after["llm_prefill"], prefill)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM ttft_tail WHERE hour >= $1 AND answered > 0", from).Scan(&tailHours); err != nil || tailHours != 3 {
		t.Errorf("without raw rows ttft_tail has %d hours, %v; want 3", tailHours, err)
	}
	var recent int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM stage_percentiles(now() - interval '59 minutes')").Scan(&recent); err != nil || recent != 0 {
		t.Errorf("the last hour (raw rows) has %d stages, %v; want 0", recent, err)
	}
}
