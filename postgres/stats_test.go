package postgres_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"

	"ragtime"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// dashboardData records a known set through the real Recorder: ten ok
// queries of the last ten minutes (TTFT 100, 200, ... 1000 ms; top_k 5 for
// the first five, 10 for the rest; prefill dominant; every other call on a
// reused connection; a quarter of the prompt cached), one error and one
// query three days old.
func dashboardData(t *testing.T) (*postgres.Store, []ragtime.Record) {
	t.Helper()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	now := time.Now()
	var recs []ragtime.Record
	for i := range 10 {
		r := record(i)
		r.CreatedAt = now.Add(-time.Duration(i+1) * time.Minute)
		ttft := 100 * float64(i+1)
		r.TTFTMs = ptr(ttft)
		r.Model = "sim-a"
		r.TopK, r.Retrieval = 5, ragtime.RetrievalHybrid
		if i >= 5 {
			r.TopK = 10
		}
		if i%3 == 0 {
			r.Retrieval = ragtime.RetrievalLexical
		}
		r.RetrievalMs = 10
		r.QueueMs = 0
		r.LLMPrefillMs = ttft - 20
		r.GenTTFTMs = ttft - 10 // llm_connect 10 ms
		r.OverheadMs = ptr(0.0)
		r.RetrievalShare = ptr(10 / ttft)
		r.PrefillShare = ptr((ttft - 20) / ttft)
		r.Usage.PromptTokens, r.Usage.CachedTokens = 1000, ptr(250)
		r.ConnReused = ptr(i%2 == 0)
		r.Stages[6].DurationMs = ttft - 20 // llm_prefill
		r.Stages[5].DurationMs = 10        // llm_connect
		r.Stages[7].DurationMs = 5000      // llm_decode: longest, but after the first token
		recs = append(recs, r)
	}
	failed := failedRecord()
	failed.CreatedAt = now.Add(-30 * time.Second)
	failed.Model, failed.Provider = "sim-a", "llmsim"
	recs = append(recs, failed)
	old := record(99)
	old.CreatedAt = now.Add(-72 * time.Hour)
	recs = append(recs, old)
	for _, r := range recs {
		rec.Record(r)
	}
	if err := rec.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != int64(len(recs)) {
		t.Fatalf("recorder stats %+v, want %d written", st, len(recs))
	}
	return postgres.NewStore(pool), recs
}

func near(got *float64, want float64) bool {
	return got != nil && math.Abs(*got-want) < 1e-6
}

func TestListQueriesPagesAndFilters(t *testing.T) {
	t.Parallel()
	store, recs := dashboardData(t)
	ctx := ctxFor(t)

	// Paging by 4 visits all 12, newest first, each once.
	var seen []ragtime.QuerySummary
	cursor := ""
	for range 10 {
		page, err := store.ListQueries(ctx, ragtime.QueryFilter{Limit: 4, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, page.Queries...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != len(recs) {
		t.Fatalf("paged through %d queries, want %d", len(seen), len(recs))
	}
	ids := map[string]bool{}
	for i, q := range seen {
		if ids[q.ID] {
			t.Fatalf("query %s listed twice", q.ID)
		}
		ids[q.ID] = true
		if i > 0 && q.CreatedAt.After(seen[i-1].CreatedAt) {
			t.Fatalf("not newest first at %d: %v after %v", i, q.CreatedAt, seen[i-1].CreatedAt)
		}
	}
	if seen[0].ID != recs[10].QueryID || seen[0].Status != "error" || seen[0].ErrorCode != "llm_auth" || seen[0].TTFTMs != nil {
		t.Errorf("newest = %+v, want the failed query", seen[0])
	}
	first := seen[1] // recs[0]
	if first.ID != recs[0].QueryID || !near(first.TTFTMs, 100) || first.Stages["llm_prefill"] != 80 || len(first.Stages) != 8 ||
		first.Retrieval != ragtime.RetrievalLexical {
		t.Errorf("second = %+v, want recs[0] with its 8 stage durations", first)
	}

	for _, tc := range []struct {
		name string
		f    ragtime.QueryFilter
		want int
	}{
		{"status", ragtime.QueryFilter{Status: "error"}, 1},
		{"model", ragtime.QueryFilter{Model: "sim-a"}, 11},
		{"top_k", ragtime.QueryFilter{TopK: 10}, 5},
		{"retrieval", ragtime.QueryFilter{Retrieval: ragtime.RetrievalLexical}, 4},
		{"since", ragtime.QueryFilter{Since: time.Now().Add(-time.Hour)}, 11},
		{"until", ragtime.QueryFilter{Until: time.Now().Add(-time.Hour)}, 1},
		{"window", ragtime.QueryFilter{Since: time.Now().Add(-5*time.Minute - 30*time.Second), Until: time.Now().Add(-90 * time.Second)}, 4},
		{"all at once", ragtime.QueryFilter{Model: "sim-a", Status: "ok", TopK: 5}, 5},
		{"nothing", ragtime.QueryFilter{Model: "no-such-model"}, 0},
	} {
		page, err := store.ListQueries(ctx, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(page.Queries) != tc.want || page.NextCursor != "" {
			t.Errorf("%s: %d queries (next %q), want %d", tc.name, len(page.Queries), page.NextCursor, tc.want)
		}
	}

	for _, bad := range []string{"x", "!!!", "MTIz", "MTIzLG5vdC1hLXV1aWQ"} {
		if _, err := store.ListQueries(ctx, ragtime.QueryFilter{Cursor: bad}); !errors.Is(err, ragtime.ErrInvalidCursor) {
			t.Errorf("cursor %q: err %v, want ErrInvalidCursor", bad, err)
		}
	}
}

func TestStatsReadsEveryView(t *testing.T) {
	t.Parallel()
	store, recs := dashboardData(t)
	st, err := store.Stats(ctxFor(t), ragtime.StatsFilter{Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Queries != 11 || st.Totals.OK != 10 || st.Totals.Errors != 1 {
		t.Errorf("totals %+v, want 11 queries, 10 ok, 1 error", st.Totals)
	}
	if !near(st.Totals.TTFTP50Ms, 550) || !near(st.Totals.TTFTP99Ms, 991) {
		t.Errorf("TTFT p50 %v p99 %v, want 550 and 991", deref(st.Totals.TTFTP50Ms), deref(st.Totals.TTFTP99Ms))
	}
	if st.Bucket != "1m0s" || len(st.Series) < 2 {
		t.Errorf("bucket %s with %d points", st.Bucket, len(st.Series))
	}

	stages := map[string]ragtime.StagePercentile{}
	var order []string
	for _, sp := range st.StagePercentiles {
		stages[sp.Stage] = sp
		order = append(order, sp.Stage)
	}
	if got := len(order); got != 8 || order[0] != "queue" || order[7] != "llm_decode" {
		t.Errorf("stage order %v", order)
	}
	if p := stages["llm_prefill"]; p.N != 10 || !near(p.P50Ms, 530) || !near(p.MaxMs, 980) {
		t.Errorf("llm_prefill percentiles %+v", p)
	}
	if p := stages["embed"]; p.N != 11 {
		t.Errorf("embed n = %d, want 11 (the error has one too)", p.N)
	}

	if len(st.TopK) != 3 {
		t.Fatalf("topk_tradeoff %+v, want top_k 3, 5 and 10", st.TopK)
	}
	k5, k10 := st.TopK[1], st.TopK[2]
	if k5.TopK != 5 || k5.OK != 5 || !near(k5.TTFTP50Ms, 300) || !near(k5.LLMPrefillP50Ms, 280) || !near(k5.PromptTokensMean, 1000) {
		t.Errorf("top_k 5: %+v", k5)
	}
	if k10.TopK != 10 || !near(k10.TTFTP50Ms, 800) || !near(k10.RetrievalP50Ms, 10) {
		t.Errorf("top_k 10: %+v", k10)
	}

	var prompt, cached int64
	for _, c := range st.CacheHitRate {
		prompt += c.PromptTokens
		if c.CachedTokens != nil {
			cached += *c.CachedTokens
		}
	}
	if prompt != 10000 || cached != 2500 || !near(st.Totals.CacheHitRate, 0.25) {
		t.Errorf("cache: %d of %d prompt tokens, totals rate %v", cached, prompt, deref(st.Totals.CacheHitRate))
	}

	// The rows are per UTC hour, so the error (30 s old, no LLM call) can
	// sit alone in an hour of its own: that row counts no call and has no
	// llm_connect percentile, and every row with calls has p95 10.
	var calls int64
	for _, n := range st.NetworkHealth {
		calls += n.LLMCalls
		switch {
		case n.Provider != "llmsim":
		case n.LLMCalls == 0 && n.ConnectP95Ms != nil:
			t.Errorf("network health %+v: an hour without LLM calls has an llm_connect p95", n)
		case n.LLMCalls > 0 && (n.ConnectP95Ms == nil || math.Abs(*n.ConnectP95Ms-10) > 1e-6):
			t.Errorf("network health %+v: llm_connect p95 want 10", n)
		}
	}
	if calls != 10 {
		t.Errorf("network health counts %d LLM calls, want 10", calls)
	}

	if len(st.TTFTTail) == 0 {
		t.Fatal("ttft_tail is empty")
	}
	for _, tt := range st.TTFTTail {
		if tt.P50Ms != nil && (tt.P99OverP50 == nil || math.Abs(*tt.P99OverP50 - *tt.P99Ms / *tt.P50Ms) > 1e-4) {
			t.Errorf("ttft_tail %+v: p99_over_p50 is not p99/p50", tt)
		}
	}

	if len(st.SlowQueries) != 11 {
		t.Fatalf("%d slow queries, want 11", len(st.SlowQueries))
	}
	slowest := st.SlowQueries[0]
	if slowest.ID != recs[9].QueryID || !near(slowest.TTFTMs, 1000) || slowest.DominantStage == nil || *slowest.DominantStage != "llm_prefill" || !near(slowest.DominantMs, 980) {
		t.Errorf("slowest %+v, want recs[9] dominated by llm_prefill (980 ms)", slowest)
	}
	if last := st.SlowQueries[10]; last.Status != "error" || *last.DominantStage != "embed" {
		t.Errorf("last slow query %+v, want the error, dominated by embed", last)
	}

	empty, err := store.Stats(ctxFor(t), ragtime.StatsFilter{Since: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if empty.Totals.Queries != 0 || empty.StagePercentiles == nil || len(empty.SlowQueries) != 0 || empty.Totals.TTFTP50Ms != nil {
		t.Errorf("a window without queries: %+v", empty)
	}
}

func TestPruneDeletesOldQueriesAndTheirStages(t *testing.T) {
	t.Parallel()
	store, recs := dashboardData(t)
	ctx := ctxFor(t)
	res, err := store.Prune(ctx, time.Now().Add(-48*time.Hour), 1)
	if err != nil || res.Deleted != 1 {
		t.Fatalf("prune: %+v, %v; want 1 deleted", res, err)
	}
	if _, err := store.GetQuery(ctx, recs[11].QueryID); !errors.Is(err, ragtime.ErrNotFound) {
		t.Errorf("the old query is still there: %v", err)
	}
	page, err := store.ListQueries(ctx, ragtime.QueryFilter{})
	if err != nil || len(page.Queries) != 11 {
		t.Fatalf("after prune %d queries, %v", len(page.Queries), err)
	}
	// Everything older than a minute ago, two at a time.
	if res, err = store.Prune(ctx, time.Now().Add(-time.Minute+time.Second), 2); err != nil || res.Deleted != 10 {
		t.Fatalf("second prune: %+v, %v; want 10", res, err)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestReadsScopedToAKey: a key id restricts the list and the stats to the
// queries asked with that key.
func TestReadsScopedToAKey(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	keyA, keyB := uuid.NewString(), uuid.NewString()
	now := time.Now()
	for i := range 6 {
		r := record(i)
		r.CreatedAt = now.Add(-time.Duration(i+1) * time.Minute)
		r.KeyID = keyA
		r.TopK = 3
		if i >= 2 {
			r.KeyID, r.TopK = keyB, 7
		}
		rec.Record(r)
	}
	if err := rec.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	store := postgres.NewStore(pool)
	ctx := ctxFor(t)
	for key, want := range map[string]int{keyA: 2, keyB: 4, "": 6, uuid.NewString(): 0, "not-a-uuid": 0} {
		page, err := store.ListQueries(ctx, ragtime.QueryFilter{KeyID: key})
		if err != nil || len(page.Queries) != want {
			t.Errorf("ListQueries(key %q) = %d queries, %v; want %d", key, len(page.Queries), err, want)
		}
	}
	st, err := store.Stats(ctx, ragtime.StatsFilter{Since: now.Add(-time.Hour), KeyID: keyA})
	if err != nil {
		t.Fatal(err)
	}
	if st.Totals.Queries != 2 || len(st.SlowQueries) != 2 || len(st.TopK) != 1 || st.TopK[0].TopK != 3 || len(st.StagePercentiles) == 0 ||
		st.StagePercentiles[0].N != 2 || len(st.TTFTTail) != 0 {
		t.Errorf("key A's stats: totals %+v, slow %d, topk %+v, stages %+v, ttft_tail %d", st.Totals, len(st.SlowQueries), st.TopK, st.StagePercentiles, len(st.TTFTTail))
	}
	var series int64
	for _, p := range st.Series {
		series += p.Queries
	}
	if series != 2 {
		t.Errorf("key A's series holds %d queries, want 2", series)
	}
	all, err := store.Stats(ctx, ragtime.StatsFilter{Since: now.Add(-time.Hour)})
	if err != nil || all.Totals.Queries != 6 || len(all.TopK) != 2 || all.StagePercentiles[0].N != 6 {
		t.Errorf("every key's stats: %+v, %v", all.Totals, err)
	}
}

// TestCacheHitRateLeavesUnreportedOut: a provider that reports no cached
// tokens (Ollama) stores NULL, and the hit rates count only the queries
// whose provider said: 250 of 1,000 is 25 %, not 250 of 2,000; a window of
// Ollama queries alone has an unknown rate, not 0 %.
func TestCacheHitRateLeavesUnreportedOut(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	now := time.Now()
	reported, unreported := record(1), record(2)
	reported.CreatedAt, unreported.CreatedAt = now.Add(-time.Minute), now.Add(-2*time.Minute)
	reported.Model, unreported.Model = "m", "m"
	reported.Usage.PromptTokens, reported.Usage.CachedTokens = 1000, ptr(250)
	unreported.Provider, unreported.Usage.PromptTokens, unreported.Usage.CachedTokens = "ollama", 1000, nil
	rec.Record(reported)
	rec.Record(unreported)
	if err := rec.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	store := postgres.NewStore(pool)
	ctx := ctxFor(t)
	got, err := store.GetQuery(ctx, unreported.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Usage.CachedTokens != nil {
		t.Errorf("Ollama's query reads back %d cached tokens, want nil (unknown)", *got.Usage.CachedTokens)
	}
	st, err := store.Stats(ctx, ragtime.StatsFilter{Since: now.Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !near(st.Totals.CacheHitRate, 0.25) {
		t.Errorf("totals hit rate %v, want 0.25 (the unreported query left out)", deref(st.Totals.CacheHitRate))
	}
	var unknown int64
	for _, c := range st.CacheHitRate {
		unknown += c.UnknownQueries
		if c.Model == "m" && c.Provider == "llmsim" && !near(c.HitRate, 0.25) {
			t.Errorf("cache_hit_rate row %+v, want hit rate 0.25", c)
		}
	}
	if unknown != 1 {
		t.Errorf("%d unknown queries in cache_hit_rate, want 1", unknown)
	}

	var rate *float64
	if err := pool.QueryRow(ctx, `SELECT hit_rate FROM cache_hit_rate WHERE model = 'ollama-only'`).Scan(&rate); err == nil {
		t.Fatalf("unexpected row")
	}
	only := record(3)
	only.CreatedAt, only.Model, only.Provider, only.Usage.CachedTokens = now.Add(-time.Minute), "ollama-only", "ollama", nil
	rec = postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	rec.Record(only)
	if err := rec.Close(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT hit_rate FROM cache_hit_rate WHERE model = 'ollama-only'`).Scan(&rate); err != nil || rate != nil {
		t.Errorf("hit rate of an Ollama-only hour: %v (%v), want NULL (unknown, not 0 %%)", deref(rate), err)
	}
}
