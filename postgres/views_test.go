package postgres_test

import (
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// twoProviders records, in ten minutes of the last hour, five extractive answers
// (TTFT 3 ms, no model call) and five of a hosted model (TTFT 150 ms), all
// with top_k 8: the mix whose one p50 used to mean nothing.
func twoProviders(t *testing.T) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	// All ten in one UTC hour (ttft_tail groups by hour) and the last
	// one: the ten minutes before now, or, in an hour's first ten
	// minutes, the previous hour's last ten.
	end := time.Now()
	if end.Sub(end.Truncate(time.Hour)) <= 11*time.Minute {
		end = end.Truncate(time.Hour)
	}
	for i := range 10 {
		r := record(i)
		r.CreatedAt = end.Add(-time.Duration(i+1) * time.Minute)
		ttft := 150.0
		r.Provider, r.Model = "openai", "gpt-x"
		if i%2 == 0 {
			ttft = 3
			r.Provider, r.Model, r.ConnReused, r.UpstreamStatus = "extractive", "extractive", nil, 0
		}
		r.TTFTMs = ptr(ttft)
		r.Stages[6].DurationMs = ttft - 1 // llm_prefill
		rec.Record(r)
	}
	if err := rec.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	return pool, postgres.NewStore(pool)
}

// TestViewsGroupByProviderAndModel: no view averages an extractive 3 ms
// answer with a model's 150 ms one, and network_health leaves the
// in-process provider out.
func TestViewsGroupByProviderAndModel(t *testing.T) {
	t.Parallel()
	pool, store := twoProviders(t)
	ctx := ctxFor(t)
	st, err := store.Stats(ctx, ragtime.StatsFilter{Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"extractive/extractive": 3, "openai/gpt-x": 150}

	if len(st.TopK) != 2 {
		t.Fatalf("topk_tradeoff has %d rows, want one per provider and model: %+v", len(st.TopK), st.TopK)
	}
	for _, k := range st.TopK {
		if w, ok := want[k.Provider+"/"+k.Model]; !ok || k.TopK != 8 || k.OK != 5 || !near(k.TTFTP50Ms, w) {
			t.Errorf("topk_tradeoff row %s/%s top_k %d ok %d p50 %v, want p50 %v", k.Provider, k.Model, k.TopK, k.OK, deref(k.TTFTP50Ms), w)
		}
	}
	// The ten minutes may straddle an hour: rows per hour, provider and
	// model, each of one provider's TTFT alone.
	answered := map[string]int64{}
	for _, tt := range st.TTFTTail {
		// ttft_tail reads the roll-ups: within 1 % (and 0.001 ms of rounding).
		if w := want[tt.Provider+"/"+tt.Model]; tt.P50Ms == nil || math.Abs(*tt.P50Ms-w) > 0.01*w+0.001 {
			t.Errorf("ttft_tail row %s/%s p50 %v, want %v", tt.Provider, tt.Model, deref(tt.P50Ms), w)
		}
		answered[tt.Provider+"/"+tt.Model] += tt.Answered
	}
	if len(answered) != 2 || answered["extractive/extractive"] != 5 || answered["openai/gpt-x"] != 5 {
		t.Errorf("ttft_tail answered per provider and model %v, want 5 each of 2: %+v", answered, st.TTFTTail)
	}
	prefill := map[string]ragtime.StagePercentile{}
	for _, sp := range st.StagePercentiles {
		if sp.Stage == ragtime.StageLLMPrefill {
			prefill[sp.Provider+"/"+sp.Model] = sp
		}
	}
	if len(prefill) != 2 || !near(prefill["extractive/extractive"].P50Ms, 2) || !near(prefill["openai/gpt-x"].P50Ms, 149) {
		t.Errorf("stage_percentiles llm_prefill per provider: %+v, want p50 2 and 149", prefill)
	}
	cached := map[string]int64{}
	for _, c := range st.CacheHitRate {
		cached[c.Provider+"/"+c.Model] += c.Queries
	}
	if len(cached) != 2 || cached["openai/gpt-x"] != 5 {
		t.Errorf("cache_hit_rate queries per provider and model %v, want 5 each of 2", cached)
	}
	var calls int64
	for _, n := range st.NetworkHealth {
		if n.Provider != "openai" || n.Model != "gpt-x" {
			t.Errorf("network_health row of %s/%s, want openai gpt-x only (extractive makes no call)", n.Provider, n.Model)
		}
		calls += n.LLMCalls
	}
	if calls != 5 {
		t.Errorf("network_health counts %d calls, want 5", calls)
	}
	for _, q := range st.SlowQueries {
		if w := want[q.Provider+"/"+q.Model]; !near(q.TTFTMs, w) {
			t.Errorf("slow query %s of %s/%s: ttft %v, want %v", q.ID, q.Provider, q.Model, deref(q.TTFTMs), w)
		}
	}

	// A filter on provider or model goes through the functions.
	var n int
	var p50 float64
	if err := pool.QueryRow(ctx, `SELECT count(*), max(ttft_p50_ms) FROM topk_tradeoff(now() - interval '1 hour') WHERE provider = 'openai' AND model = 'gpt-x'`).Scan(&n, &p50); err != nil || n != 1 || p50 != 150 {
		t.Errorf("topk_tradeoff filtered to openai: %d rows, p50 %v, %v; want 1 row at 150", n, p50, err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM sweep_results WHERE provider = 'extractive'`).Scan(&n); err != nil {
		t.Errorf("sweep_results has no provider column: %v", err)
	}
}

// TestViewsRoundMilliseconds: every millisecond a view or dashboard
// function returns is numeric rounded to 0.001 ms, not 3.8606499999999997,
// and a mean of integers is not 108.0000000000000000.
func TestViewsRoundMilliseconds(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	now := time.Now()
	// p50 of 3.860 and 3.8613 interpolates to 3.86065 (3.8606499999999997 in float8).
	for i, ttft := range []float64{3.860, 3.8613} {
		r := record(i)
		r.CreatedAt = now.Add(-time.Duration(i+1) * time.Minute)
		r.TTFTMs = ptr(ttft)
		r.Usage.PromptTokens = 108
		r.Stages[1].DurationMs = ttft // embed
		rec.Record(r)
	}
	if err := rec.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	for _, tc := range []struct{ sql, want string }{
		{`SELECT ttft_p50_ms::text FROM topk_tradeoff(now() - interval '1 hour')`, "3.861"},
		{`SELECT prompt_tokens_mean::text FROM topk_tradeoff(now() - interval '1 hour')`, "108.000"},
		// From the roll-ups (within 1 % of 3.86065), rounded the same way.
		{`SELECT scale(ttft_p50_ms)::text FROM ttft_tail WHERE hour >= now() - interval '2 hours' LIMIT 1`, "3"},
		{`SELECT p50_ms::text FROM stage_percentiles(now() - interval '1 hour') WHERE stage = 'embed'`, "3.861"},
		{`SELECT ttft_ms::text FROM slow_queries ORDER BY ttft_ms DESC LIMIT 1`, "3.861"},
		{`SELECT ttft_ms::text FROM ttft_breakdown ORDER BY ttft_ms LIMIT 1`, "3.860"},
	} {
		var got string
		if err := pool.QueryRow(ctx, tc.sql).Scan(&got); err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.sql, got, err, tc.want)
		}
	}

	// Every _ms column of every view and dashboard function is numeric.
	rows, err := pool.Query(ctx, `SELECT table_name || '.' || column_name, data_type FROM information_schema.columns
		WHERE table_schema = 'public' AND column_name LIKE '%\_ms'
		  AND table_name IN (SELECT table_name FROM information_schema.views WHERE table_schema = 'public')`)
	if err != nil {
		t.Fatal(err)
	}
	cols := 0
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			t.Fatal(err)
		}
		cols++
		if typ != "numeric" {
			t.Errorf("%s is %s, want numeric (rounded to 0.001 ms)", col, typ)
		}
	}
	if rows.Err() != nil || cols < 20 {
		t.Errorf("read %d _ms view columns (%v), want every view's", cols, rows.Err())
	}
	for _, fn := range []string{"stage_percentiles(now())", "topk_tradeoff(now())"} {
		rows, err := pool.Query(ctx, "SELECT * FROM "+fn)
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range rows.FieldDescriptions() {
			if len(fd.Name) > 3 && fd.Name[len(fd.Name)-3:] == "_ms" && fd.DataTypeOID != pgtype.NumericOID {
				t.Errorf("%s column %s has type oid %d, want numeric", fn, fd.Name, fd.DataTypeOID)
			}
		}
		rows.Close()
	}
}

// TestStatsFilterByProviderAndModel: /v1/stats's filter reaches every read,
// and Models lists the window's providers and models whatever the filter.
func TestStatsFilterByProviderAndModel(t *testing.T) {
	t.Parallel()
	_, store := twoProviders(t)
	ctx := ctxFor(t)
	since := time.Now().Add(-time.Hour)
	for _, f := range []ragtime.StatsFilter{
		{Since: since, Provider: "openai"},
		{Since: since, Model: "gpt-x"},
		{Since: since, Provider: "openai", Model: "gpt-x"},
	} {
		st, err := store.Stats(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Totals.Queries != 5 || !near(st.Totals.TTFTP50Ms, 150) || st.Provider != f.Provider || st.Model != f.Model {
			t.Errorf("%+v: totals %+v (p50 %v), want 5 queries at 150 ms", f, st.Totals, deref(st.Totals.TTFTP50Ms))
		}
		var series int64
		for _, p := range st.Series {
			series += p.Queries
		}
		// the hourly views have a row per hour the ten minutes touch: 1 or 2
		hourly := func(n int) bool { return n == 1 || n == 2 }
		if series != 5 || len(st.TopK) != 1 || !hourly(len(st.TTFTTail)) || !hourly(len(st.CacheHitRate)) || !hourly(len(st.NetworkHealth)) || len(st.SlowQueries) != 5 {
			t.Errorf("%+v: series %d, topk %d, ttft_tail %d, cache %d, network %d, slow %d; want 5 and one row each, 5 slow",
				f, series, len(st.TopK), len(st.TTFTTail), len(st.CacheHitRate), len(st.NetworkHealth), len(st.SlowQueries))
		}
		for _, sp := range st.StagePercentiles {
			if sp.Provider != "openai" {
				t.Errorf("%+v: stage_percentiles row of %s", f, sp.Provider)
			}
		}
		if len(st.Models) != 2 || st.Models[0].Provider != "extractive" || st.Models[1].Model != "gpt-x" || st.Models[1].Queries != 5 {
			t.Errorf("%+v: models %+v, want extractive and openai/gpt-x", f, st.Models)
		}
	}
	st, err := store.Stats(ctx, ragtime.StatsFilter{Since: since, Provider: "extractive", Model: "gpt-x"})
	if err != nil || st.Totals.Queries != 0 || len(st.StagePercentiles) != 0 || len(st.SlowQueries) != 0 {
		t.Errorf("a provider and model that never met: %+v, %v; want nothing", st.Totals, err)
	}
	page, err := store.ListQueries(ctx, ragtime.QueryFilter{Provider: "extractive"})
	if err != nil || len(page.Queries) != 5 {
		t.Errorf("ListQueries(provider extractive) = %d queries, %v; want 5", len(page.Queries), err)
	}
}
