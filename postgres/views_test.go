package postgres_test

import (
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// twoProviders records, in the last ten minutes, five extractive answers
// (TTFT 3 ms, no model call) and five of a hosted model (TTFT 150 ms), all
// with top_k 8: the mix whose one p50 used to mean nothing.
func twoProviders(t *testing.T) (*pgxpool.Pool, *postgres.Store) {
	t.Helper()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	now := time.Now()
	for i := range 10 {
		r := record(i)
		r.CreatedAt = now.Add(-time.Duration(i+1) * time.Minute)
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
	st, err := store.Stats(ctx, time.Now().Add(-time.Hour), "")
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
	if len(st.TTFTTail) != 2 {
		t.Fatalf("ttft_tail has %d rows, want 2 (one hour, two providers): %+v", len(st.TTFTTail), st.TTFTTail)
	}
	for _, tt := range st.TTFTTail {
		// ttft_tail reads the roll-ups: within 1 % (and 0.001 ms of rounding).
		if w := want[tt.Provider+"/"+tt.Model]; tt.P50Ms == nil || math.Abs(*tt.P50Ms-w) > 0.01*w+0.001 || tt.Answered != 5 {
			t.Errorf("ttft_tail row %s/%s p50 %v answered %d, want %v and 5", tt.Provider, tt.Model, deref(tt.P50Ms), tt.Answered, w)
		}
	}
	prefill := map[string]pipeline.StagePercentile{}
	for _, sp := range st.StagePercentiles {
		if sp.Stage == pipeline.StageLLMPrefill {
			prefill[sp.Provider+"/"+sp.Model] = sp
		}
	}
	if len(prefill) != 2 || !near(prefill["extractive/extractive"].P50Ms, 2) || !near(prefill["openai/gpt-x"].P50Ms, 149) {
		t.Errorf("stage_percentiles llm_prefill per provider: %+v, want p50 2 and 149", prefill)
	}
	if len(st.CacheHitRate) != 2 {
		t.Errorf("cache_hit_rate has %d rows, want 2", len(st.CacheHitRate))
	}
	if len(st.NetworkHealth) != 1 || st.NetworkHealth[0].Provider != "openai" || st.NetworkHealth[0].Model != "gpt-x" || st.NetworkHealth[0].LLMCalls != 5 {
		t.Errorf("network_health %+v, want one row: openai gpt-x with 5 calls (extractive makes none)", st.NetworkHealth)
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
