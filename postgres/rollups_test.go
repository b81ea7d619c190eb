package postgres_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
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
	recs := make([]ragtime.Record, n)
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
			r.Status, r.ErrorCode = ragtime.StatusError, "llm_unavailable"
		case 1:
			r.Status = ragtime.StatusCancelled
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
	var recs []ragtime.Record
	for i := range 40 {
		r := record(i)
		if i%4 == 0 {
			r.Status, r.TTFTMs = ragtime.StatusCancelled, nil
		}
		recs = append(recs, r)
	}
	recordAll(t, pool, recs...)
	checkRollupsMatchRows(t, pool)
}

// checkRollupsMatchRows checks that query_rollups holds what rollup_fill
// builds from the stored rows: every stored query counted once. It
// replaces query_rollups with rollup_fill's rows.
func checkRollupsMatchRows(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := ctxFor(t)
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
	var recs []ragtime.Record
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

// TestStatsLongWindowFromRollups: /v1/stats over more than an hour reads
// its totals and series from the roll-ups — counts, shares and the cache
// hit rate as the raw rows give them, TTFT percentiles within 1 % — and
// still does with the raw rows gone: over 30 hours (hourly points) and over
// 3 hours (5-minute points, from minute rows).
func TestStatsLongWindowFromRollups(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		window, bucket time.Duration
	}{{30 * time.Hour, time.Hour}, {3 * time.Hour, 5 * time.Minute}} {
		t.Run(c.window.String(), func(t *testing.T) {
			t.Parallel()
			statsFromRollups(t, c.window, c.bucket)
		})
	}
}

func statsFromRollups(t *testing.T, window, bucket time.Duration) {
	pool := postgrestest.NewPool(t)
	ctx := ctxFor(t)
	rng := rand.New(rand.NewPCG(5, 6))
	since := time.Now().Add(-window)
	var recs []ragtime.Record
	for i := range 400 {
		r := record(i)
		r.QueryID = uuid.NewString()
		r.CreatedAt = since.Add(time.Minute + time.Duration(i)*20*time.Second) // 2 h 13 min, ending over 40 min ago
		ttft := 80 + 300*rng.Float64()
		r.TTFTMs, r.QueueMs, r.RetrievalMs = &ttft, 5*rng.Float64(), 10+5*rng.Float64()
		r.GenTTFTMs, r.LLMPrefillMs = ttft-20, ttft-25
		r.OverheadMs = ptr(ttft - r.QueueMs - r.RetrievalMs - r.GenTTFTMs)
		r.RetrievalShare, r.PrefillShare = ptr(r.RetrievalMs/ttft), ptr(r.LLMPrefillMs/ttft)
		r.Usage.PromptTokens, r.Usage.CachedTokens = 1000+rng.IntN(500), ptr(rng.IntN(800))
		switch i % 10 {
		case 0:
			r.Usage.CachedTokens = nil // a provider that does not say
		case 1:
			r.Status, r.TTFTMs, r.OverheadMs, r.RetrievalShare, r.PrefillShare = ragtime.StatusError, nil, nil, nil, nil
		case 2:
			r.Status = ragtime.StatusCancelled
		}
		if i%4 == 3 {
			r.Model = "other-model"
		}
		recs = append(recs, r)
	}
	recordAll(t, pool, recs...)
	store := postgres.NewStore(pool)
	// A model filter applies to the roll-ups' rows as to the raw ones.
	other, err := store.Stats(ctx, ragtime.StatsFilter{Since: since, Model: "other-model"})
	if err != nil {
		t.Fatal(err)
	}
	if other.Totals.Queries != 100 || len(other.Models) != 2 || len(other.Series) == 0 {
		t.Errorf("stats of other-model: %d queries, models %+v, %d points; want 100 of 2 models", other.Totals.Queries, other.Models, len(other.Series))
	}
	st, err := store.Stats(ctx, ragtime.StatsFilter{Since: since})
	if err != nil {
		t.Fatal(err)
	}
	if st.Bucket != bucket.String() {
		t.Fatalf("bucket %s, want %s for a %s window", st.Bucket, bucket, window)
	}
	rows, _ := pool.Query(ctx, postgres.TotalsSQL, since, time.Now())
	exact, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[ragtime.Totals])
	if err != nil {
		t.Fatal(err)
	}
	rows, _ = pool.Query(ctx, postgres.SeriesSQL, since, time.Now(), bucket)
	exactSeries, err := pgx.CollectRows(rows, pgx.RowToStructByName[ragtime.SeriesPoint])
	if err != nil {
		t.Fatal(err)
	}
	// Shares are rounded to 0.0001 on both sides: the roll-ups' mean and
	// the raw rows' may round to neighbouring steps.
	const shareStep = 0.0001 + 1e-12
	within := func(what string, got, want *float64, tol float64) {
		t.Helper()
		if (got == nil) != (want == nil) || got != nil && math.Abs(*got-*want) > tol*math.Abs(*want)+1e-12 {
			t.Errorf("%s: roll-ups %v, raw rows %v", what, deref(got), deref(want))
		}
	}
	withinStep := func(what string, got, want *float64) {
		t.Helper()
		if (got == nil) != (want == nil) || got != nil && math.Abs(*got-*want) > shareStep {
			t.Errorf("%s: roll-ups %v, raw rows %v", what, deref(got), deref(want))
		}
	}
	// Every figure is rounded as the views round: ms to 0.001, shares to 0.0001.
	rounded := func(from string, st ragtime.Totals, series []ragtime.SeriesPoint) {
		t.Helper()
		checkRounded(t, from+" totals", 3, st.TTFTP50Ms, st.TTFTP95Ms, st.TTFTP99Ms)
		checkRounded(t, from+" totals", 4, st.CacheHitRate)
		for _, p := range series {
			checkRounded(t, from+" series", 3, p.TTFTP50Ms, p.TTFTP95Ms, p.TTFTP99Ms)
			checkRounded(t, from+" series", 4, p.QueueShare, p.RetrievalShare, p.ConnectShare, p.PrefillShare, p.OverheadShare, p.CacheHitRate)
		}
	}
	rounded("raw rows'", exact, exactSeries)
	check := func(st pipeline.Stats) {
		t.Helper()
		rounded("roll-ups'", st.Totals, st.Series)
		got := st.Totals
		if got.Queries != 400 || got.Queries != exact.Queries || got.OK != exact.OK || got.Errors != exact.Errors || got.Cancelled != exact.Cancelled {
			t.Errorf("totals from roll-ups %+v, raw %+v", got, exact)
		}
		within("ttft p50", got.TTFTP50Ms, exact.TTFTP50Ms, 0.01)
		within("ttft p99", got.TTFTP99Ms, exact.TTFTP99Ms, 0.01)
		withinStep("cache hit rate", got.CacheHitRate, exact.CacheHitRate)
		if len(st.Series) != len(exactSeries) || len(st.Series) < 3 {
			t.Fatalf("%d series points from roll-ups, %d from raw rows", len(st.Series), len(exactSeries))
		}
		for i, p := range st.Series {
			e := exactSeries[i]
			if !p.Time.Equal(e.Time) || p.Queries != e.Queries {
				t.Errorf("series point %d: %v %d queries, raw %v %d", i, p.Time, p.Queries, e.Time, e.Queries)
			}
			within("series ttft p95", p.TTFTP95Ms, e.TTFTP95Ms, 0.01)
			withinStep("queue share", p.QueueShare, e.QueueShare)
			withinStep("retrieval share", p.RetrievalShare, e.RetrievalShare)
			withinStep("llm_connect share", p.ConnectShare, e.ConnectShare)
			withinStep("llm_prefill share", p.PrefillShare, e.PrefillShare)
			withinStep("overhead share", p.OverheadShare, e.OverheadShare)
			withinStep("series cache hit rate", p.CacheHitRate, e.CacheHitRate)
		}
	}
	check(st)
	if _, err := pool.Exec(ctx, "TRUNCATE queries, query_stages"); err != nil {
		t.Fatal(err)
	}
	if st, err = store.Stats(ctx, ragtime.StatsFilter{Since: since}); err != nil {
		t.Fatal(err)
	}
	check(st) // the same, without a raw row
}

// TestRollupHistAdd: the sum of two histograms, bucket by bucket, over the
// union of their buckets, whichever is wider and however they overlap.
func TestRollupHistAdd(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	for _, c := range []struct{ a, b, want string }{
		{"[3:5]={1,2,3}", "[4:4]={7}", "[3:5]={1,9,3}"},       // b within a
		{"[4:4]={7}", "[3:5]={1,2,3}", "[3:5]={1,9,3}"},       // a within b
		{"[3:5]={1,2,3}", "[3:5]={1,1,1}", "[3:5]={2,3,4}"},   // the same buckets
		{"[3:4]={1,2}", "[5:6]={1,1}", "[3:6]={1,2,1,1}"},     // disjoint
		{"[3:5]={1,2,3}", "[2:4]={1,1,1}", "[2:5]={1,2,3,3}"}, // overlapping, one wider below
		{"[-1:0]={5,6}", "[0:2]={1,1,1}", "[-1:2]={5,7,1,1}"}, // bucket -1
		{"[3:4]={1,2}", "[1:5]={1,1,1,1,1}", "{1,1,2,3,1}"},   // starting at 1: no bounds in the text
	} {
		var got string
		if err := pool.QueryRow(ctxFor(t), "SELECT rollup_hist_add($1::bigint[], $2::bigint[])::text", c.a, c.b).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("rollup_hist_add(%s, %s) = %s, want %s", c.a, c.b, got, c.want)
		}
	}
	var null bool
	if err := pool.QueryRow(ctxFor(t), "SELECT rollup_hist_add(NULL, '{1}') = '{1}' AND rollup_hist_add('{2}', NULL) = '{2}'").Scan(&null); err != nil || !null {
		t.Errorf("rollup_hist_add with a NULL side: %v, %v", null, err)
	}
}

// TestWideRollupHistogramsAreNotCompressed: a roll-up row whose histogram
// spans hundreds of buckets (kilobytes) is written without a compression
// attempt (migration 0036), which cost every upsert of such a row a pglz
// pass, and its median reads back within the buckets' 0.99 %.
func TestWideRollupHistogramsAreNotCompressed(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	// One minute of one stage from 0.002 ms to some 16 minutes: about a
	// thousand buckets, a few of them counted (a sparse array compresses
	// well, so pglz would have kept its output).
	var recs []ragtime.Record
	for i, ms := range []float64{0.002, 0.5, 40, 3000, 1e6} {
		r := record(i)
		r.CreatedAt = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
		r.Stages = r.Stages[:1]
		r.Stages[0].DurationMs = ms
		recs = append(recs, r)
	}
	recordAll(t, pool, recs...)
	var wide, compressed, width int
	err := pool.QueryRow(ctxFor(t), `SELECT count(*), count(pg_column_compression(hist)), max(cardinality(hist))
		FROM query_rollups WHERE stage = $1 AND span = 'minute'`, recs[0].Stages[0].Name).Scan(&wide, &compressed, &width)
	if err != nil {
		t.Fatal(err)
	}
	if wide != 1 || width < 900 {
		t.Fatalf("%d minute rows, widest %d buckets; want one of ~1,000", wide, width)
	}
	if compressed != 0 {
		t.Errorf("the %d-bucket histogram was stored compressed", width)
	}
	var p50 float64
	if err := pool.QueryRow(ctxFor(t), `SELECT rollup_percentile(hist, 0.5) FROM query_rollups
		WHERE stage = $1 AND span = 'minute'`, recs[0].Stages[0].Name).Scan(&p50); err != nil {
		t.Fatal(err)
	}
	if math.Abs(p50-40)/40 > 0.0099 {
		t.Errorf("median from the stored histogram %.3f ms, want 40 within 0.99 %%", p50)
	}
	checkRounded(t, "rollup_percentile", 3, &p50)
}

// checkRounded fails when a figure has more than places decimals (nil is
// fine): what the views return, round_ms and round_share.
func checkRounded(t *testing.T, what string, places int, vs ...*float64) {
	t.Helper()
	scale := math.Pow10(places)
	for _, v := range vs {
		if v != nil && math.Abs(*v*scale-math.Round(*v*scale)) > 1e-6 {
			t.Errorf("%s: %v has more than %d decimals", what, *v, places)
		}
	}
}
