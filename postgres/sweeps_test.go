package postgres_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"ragtime"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

func TestSweepsStartTagFinish(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	sw := postgres.NewSweeps(pool)
	id := uuid.NewString()
	if err := sw.Start(ctx, id, "server", 42, map[string]any{"runs": 3}); err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(ctx, "not-a-uuid", "server", 1, nil); err == nil || !strings.Contains(err.Error(), "not a UUID") {
		t.Errorf("Start with a bad id: %v", err)
	}
	if err := sw.Start(ctx, uuid.NewString(), "sideways", 1, nil); err == nil {
		t.Error("Start with an unknown mode succeeded")
	}

	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: 10 * time.Millisecond, Logger: quietLogger()})
	inSweep, untagged, orphan := record(1), record(2), record(3)
	inSweep.SweepID = id
	orphan.SweepID = uuid.NewString() // no such sweep: the foreign key refuses it
	rec.Record(inSweep)
	rec.Record(untagged)
	rec.Record(orphan)
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != 2 || st.Failed != 1 {
		t.Errorf("recorder stats %+v, want 2 written and the orphan failed", st)
	}
	got, err := postgres.NewStore(pool).GetQuery(ctx, inSweep.QueryID)
	if err != nil || got.SweepID != id || got.MaxContextTokens != 6000 {
		t.Errorf("stored sweep id %q budget %d, %v", got.SweepID, got.MaxContextTokens, err)
	}

	// Tagging marks only untagged, stored queries; unknown ids wait.
	n, err := sw.Tag(ctx, id, []string{inSweep.QueryID, untagged.QueryID, uuid.NewString()})
	if err != nil || n != 1 {
		t.Errorf("Tag = %d, %v; want 1", n, err)
	}
	if _, err := sw.Tag(ctx, id, []string{"nope"}); err == nil {
		t.Error("Tag took a query id that is not a UUID")
	}
	if n, err := sw.Tagged(ctx, id); err != nil || n != 2 {
		t.Errorf("Tagged = %d, %v; want 2", n, err)
	}

	summary := map[string]any{"settings": []map[string]any{{"top_k": 8, "rerank_top_n": 4, "recall": 0.75, "hit_rate": 1, "mrr": 0.5}}}
	if err := sw.Finish(ctx, id, postgres.SweepDone, summary); err != nil {
		t.Fatal(err)
	}
	if err := sw.Finish(ctx, uuid.NewString(), postgres.SweepDone, summary); err == nil {
		t.Error("Finish of an unknown sweep succeeded")
	}
	var status string
	var queries, ok int
	var recall, p50 float64
	err = pool.QueryRow(ctx, `SELECT sweep_status, queries, ok, recall, ttft_p50_ms FROM sweep_results WHERE sweep_id = $1 AND top_k = 8`, id).
		Scan(&status, &queries, &ok, &recall, &p50)
	if err != nil {
		t.Fatal(err)
	}
	if status != "done" || queries != 2 || ok != 2 || recall != 0.75 || p50 != 412.731 {
		t.Errorf("sweep_results: %s %d %d %v %v", status, queries, ok, recall, p50)
	}
}

// TestSweepResultsByRetrieval: a sweep comparing retrieval modes gets one
// sweep_results row per mode, labelled with it and joined to that mode's
// relevance figures; the queries column refuses a mode it does not know.
func TestSweepResultsByRetrieval(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	sw := postgres.NewSweeps(pool)
	id := uuid.NewString()
	if err := sw.Start(ctx, id, "in-process", 3, nil); err != nil {
		t.Fatal(err)
	}
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: 10 * time.Millisecond, Logger: quietLogger()})
	var ids []string
	for i, mode := range []string{ragtime.RetrievalHybrid, ragtime.RetrievalHybrid, ragtime.RetrievalLexical, "dense"} {
		r := record(100 + i)
		r.SweepID, r.Retrieval = id, mode
		rec.Record(r)
		ids = append(ids, r.QueryID)
	}
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != 3 || st.Failed != 1 {
		t.Errorf("recorder stats %+v, want 3 written and the unknown mode refused", st)
	}
	if got, err := postgres.NewStore(pool).GetQuery(ctx, ids[2]); err != nil || got.Retrieval != ragtime.RetrievalLexical {
		t.Errorf("stored retrieval %q, %v", got.Retrieval, err)
	}
	summary := map[string]any{"settings": []map[string]any{
		{"retrieval": "lexical", "top_k": 8, "rerank_top_n": 4, "recall": 0.5, "hit_rate": 0.5, "mrr": 0.25},
		{"retrieval": "hybrid", "top_k": 8, "rerank_top_n": 4, "recall": 0.75, "hit_rate": 1, "mrr": 0.5},
	}}
	if err := sw.Finish(ctx, id, postgres.SweepDone, summary); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT retrieval, queries, recall FROM sweep_results WHERE sweep_id = $1 ORDER BY retrieval`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var mode string
		var n int
		var recall float64
		if err := rows.Scan(&mode, &n, &recall); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %d %g", mode, n, recall))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"hybrid 2 0.75", "lexical 1 0.5"}; !slices.Equal(got, want) {
		t.Errorf("sweep_results by mode %q, want %q", got, want)
	}
}

// TestSweepResultsByBudget: a sweep that asks a TTFT budget at the same
// top_k as a fixed setting gets a row for each, each with its own recall.
func TestSweepResultsByBudget(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	sw := postgres.NewSweeps(pool)
	id := uuid.NewString()
	if err := sw.Start(ctx, id, "in-process", 3, nil); err != nil {
		t.Fatal(err)
	}
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: 10 * time.Millisecond, Logger: quietLogger()})
	for i, budget := range []float64{0, 0, 45} {
		r := record(200 + i)
		r.SweepID = id
		if budget > 0 {
			r.TTFTBudgetMs = &budget
		}
		rec.Record(r)
	}
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	summary := map[string]any{"settings": []map[string]any{
		{"top_k": 8, "rerank_top_n": 4, "recall": 1},
		{"top_k": 8, "rerank_top_n": 4, "ttft_budget_ms": 45, "recall": 0.75},
	}}
	if err := sw.Finish(ctx, id, postgres.SweepDone, summary); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT coalesce(ttft_budget_ms, 0), queries, recall FROM sweep_results WHERE sweep_id = $1 ORDER BY 1`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var budget, recall float64
		var n int
		if err := rows.Scan(&budget, &n, &recall); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%g %d %g", budget, n, recall))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"0 2 1", "45 1 0.75"}; !slices.Equal(got, want) {
		t.Errorf("sweep_results by budget %q, want %q", got, want)
	}
}
