package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"ragtime"
	"ragtime/embedcache"
	"ragtime/metrics"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
	"ragtime/retrieval"
	"ragtime/tracing"
)

func ptr[T any](v T) *T { return &v }

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestRecorderObservesThenForwards records two queries through the
// decorator into a real PostgreSQL recorder and reads them back from
// /metrics: histograms, counters, the recorder's counters and the standard
// collectors.
func TestRecorderObservesThenForwards(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: slog.New(slog.DiscardHandler)})
	m := metrics.New(rec)
	r := m.Recorder(rec)

	ok := ragtime.Record{
		QueryID:        uuid.NewString(),
		QuestionSHA256: "x",
		TopK:           5,
		Model:          "sim",
		Provider:       "llmsim",
		Status:         ragtime.StatusOK,
		Stages: []ragtime.Span{
			{Name: "embed", Seq: 0, DurationMs: 2},
			{Name: "llm_prefill", Seq: 1, StartMs: 50, DurationMs: 180},
		},
		Figures: ragtime.Figures{
			TTFTMs:         ptr(250.0),
			FirstTokenMs:   ptr(240.0),
			E2EMs:          1500,
			RetrievalMs:    50,
			RetrievalShare: ptr(0.2),
			OverheadMs:     ptr(0.4),
			Usage:          ragtime.Usage{PromptTokens: 900, CompletionTokens: 40, CachedTokens: new(300)},
		},
	}
	failed := ragtime.Record{
		QueryID:        uuid.NewString(),
		QuestionSHA256: "y",
		TopK:           5,
		Model:          "sim",
		Provider:       "llmsim",
		Status:         ragtime.StatusError,
		ErrorCode:      "llm_unavailable",
		Stages:         []ragtime.Span{{Name: "embed", Seq: 0, DurationMs: 3}},
		Figures: ragtime.Figures{
			E2EMs: 30,
		},
	}
	r.Record(ok)
	r.Record(failed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}

	out := scrape(t, m.Handler())
	for _, want := range []string{
		`ragtime_stage_duration_seconds_count{stage="embed"} 2`,
		`ragtime_stage_duration_seconds_bucket{stage="llm_prefill",le="0.25"} 1`,
		`ragtime_stage_duration_seconds_bucket{stage="llm_prefill",le="0.1"} 0`,
		`ragtime_ttft_seconds_sum 0.25`,
		`ragtime_ttft_seconds_count 1`,
		`ragtime_first_token_seconds_sum 0.24`,
		`ragtime_retrieval_share_bucket{le="0.2"} 1`,
		`ragtime_retrieval_share_bucket{le="0.1"} 0`,
		`ragtime_request_duration_seconds_count 2`,
		`ragtime_queries_total{status="ok"} 1`,
		`ragtime_queries_total{status="error"} 1`,
		`ragtime_queries_total{status="cancelled"} 0`,
		`ragtime_query_errors_total{code="llm_unavailable"} 1`,
		`ragtime_tokens_total{type="prompt"} 900`,
		`ragtime_tokens_total{type="cached"} 300`,
		`ragtime_recorder_written_total 2`,
		`ragtime_recorder_queue_depth 0`,
		`ragtime_recorder_dropped_total 0`,
		`ragtime_recorder_retries_total 0`,
		`ragtime_overhead_seconds_count 1`,
		`ragtime_overhead_seconds_bucket{le="0.0005"} 1`,
		`go_sched_latencies_seconds_count `,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		exact := strings.Contains(out, want+"\n")
		if !exact && !(strings.HasSuffix(want, " ") && strings.Contains(out, want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Records after Close are dropped by the recorder, and the drop shows.
	r.Record(ragtime.Record{QueryID: uuid.NewString(), Status: ragtime.StatusCancelled})
	out = scrape(t, m.Handler())
	for _, want := range []string{
		"ragtime_recorder_dropped_total 1\n",
		`ragtime_query_errors_total{code="cancelled"} 1` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("after a drop, /metrics lacks %q", want)
		}
	}
}

type traceStats struct{ s tracing.Stats }

func (t traceStats) Stats() tracing.Stats { return t.s }

// TestExemplarsInOpenMetrics: a traced query's trace id is an exemplar of
// its TTFT and stage observations, served when the scraper asks for
// OpenMetrics (the Prometheus text format has no exemplars); the tracer's
// counters are there too.
func TestExemplarsInOpenMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New(nil)
	m.Tracing(traceStats{tracing.Stats{Queued: 2, Traced: 5, Dropped: 3, SpansExported: 40, SpansFailed: 7}})
	const id = "0af7651916cd43dd8448eb211c80319c"
	m.Observe(ragtime.Record{QueryID: "q", Status: ragtime.StatusOK, TraceID: id,
		Figures: ragtime.Figures{TTFTMs: ptr(42.0), FirstTokenMs: ptr(41.0), E2EMs: 90},
		Stages:  []ragtime.Span{{Name: ragtime.StageSearch, DurationMs: 3}}})
	m.Observe(ragtime.Record{QueryID: "untraced", Status: ragtime.StatusOK, Figures: ragtime.Figures{TTFTMs: ptr(9000.0)}})

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`ragtime_ttft_seconds_bucket{le="0.06"} 1 # {trace_id="` + id + `"} 0.042`,
		`ragtime_stage_duration_seconds_bucket{stage="search",le="0.005"} 1 # {trace_id="` + id + `"} 0.003`,
		`ragtime_first_token_seconds_bucket{le="0.06"} 1 # {trace_id="` + id + `"} 0.041`,
		"ragtime_trace_queue_depth 2", "ragtime_traces_total 5", "ragtime_traces_dropped_total 3",
		"ragtime_trace_spans_exported_total 40", "ragtime_trace_spans_failed_total 7",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("OpenMetrics scrape lacks %q", want)
		}
	}
	if strings.Count(body, "trace_id=") != 3 {
		t.Errorf("%d exemplars, want 3 (the untraced query has none):\n%s", strings.Count(body, "trace_id="), body)
	}
	if plain := scrape(t, m.Handler()); strings.Contains(plain, "trace_id") {
		t.Errorf("the Prometheus text format carries exemplars")
	}
}

// TestEmbedCacheCounts: the cache's hits, misses and entries are on
// /metrics as they stand at the scrape.
func TestEmbedCacheCounts(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: slog.New(slog.DiscardHandler)})
	defer rec.Close(context.Background())
	emb, err := retrieval.NewHashEmbedder(8)
	if err != nil {
		t.Fatal(err)
	}
	cache, err := embedcache.New(emb, embedcache.Config{Embedder: emb.Name(), Dimension: 8, Size: 4, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(rec)
	m.EmbedCache(cache)
	for _, q := range []string{"a", "b", "a", " a ", "c"} {
		if _, err := cache.Embed(context.Background(), []string{q}); err != nil {
			t.Fatal(err)
		}
	}
	out := scrape(t, m.Handler())
	for _, want := range []string{`ragtime_embed_cache_lookups_total{result="hit"} 2`, `ragtime_embed_cache_lookups_total{result="miss"} 3`,
		"ragtime_embed_cache_entries 3"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
