package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"ragtime"
	"ragtime/migrations"
	"ragtime/pipeline/pipelinetest"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxFor(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func ptr[T any](v T) *T { return &v }

// record builds a realistic finished query: every field set, eight stages
// with attrs whose values are what JSON decoding yields.
func record(i int) ragtime.Record {
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * 1234567 * time.Microsecond)
	return ragtime.Record{
		QueryID:          uuid.NewString(),
		CreatedAt:        created,
		Question:         fmt.Sprintf("how long does prefill take for question %d?", i),
		QuestionSHA256:   fmt.Sprintf("%064x", i),
		TopK:             8,
		RerankTopN:       4,
		MaxTokens:        512,
		MaxContextTokens: 6000,
		Model:            "llmsim-8b",
		Provider:         "llmsim",
		Status:           ragtime.StatusOK,
		ConnReused:       ptr(true),
		UpstreamStatus:   200,
		RequestID:        "req-" + fmt.Sprint(i),
		ServerQueueMs:    ptr(1.5),
		ServerPrefillMs:  ptr(340.25),
		ServerLoadMs:     ptr(0.125),
		Stages: []ragtime.Span{
			{Name: ragtime.StageQueue, Seq: 0, StartMs: 0, DurationMs: 0.004},
			{Name: ragtime.StageEmbed, Seq: 1, StartMs: 0.01, DurationMs: 3.217, Attrs: map[string]any{"texts": 1.0, "model": "hash-384"}},
			{Name: ragtime.StageSearch, Seq: 2, StartMs: 3.3, DurationMs: 12.5, Attrs: map[string]any{"k": 8.0, "hits": 8.0, "store": "embedded"}},
			{Name: ragtime.StageRerank, Seq: 3, StartMs: 15.9, DurationMs: 9.1, Attrs: map[string]any{"candidates": 8.0, "top_n": 4.0}},
			{Name: ragtime.StageAssemble, Seq: 4, StartMs: 25.1, DurationMs: 10.025, Attrs: map[string]any{"chunks": 4.0, "context_tokens": 1800.0, "prompt_tokens": 2048.0}},
			{Name: ragtime.StageLLMConnect, Seq: 5, StartMs: 35.2, DurationMs: 11.301, Attrs: map[string]any{"reused": true, "dns_ms": 0.0, "connect_ms": 0.0, "tls_ms": 0.0}},
			{Name: ragtime.StageLLMPrefill, Seq: 6, StartMs: 46.6, DurationMs: 365.9, Attrs: map[string]any{"server_queue_ms": 1.5, "server_prefill_ms": 340.25, "nested": map[string]any{"list": []any{1.0, "a", nil}}}},
			{Name: ragtime.StageLLMDecode, Seq: 7, StartMs: 412.5, DurationMs: 1477.9, Attrs: map[string]any{"chunks": 180.0, "completion_tokens": 180.0, "itl_p50_ms": 8.1, "itl_p95_ms": 12.7, "itl_max_ms": 30.003}},
		},
		Figures: ragtime.Figures{
			TTFTMs:         ptr(412.731),
			FirstTokenMs:   ptr(398.002),
			E2EMs:          1890.456,
			QueueMs:        0.004,
			RetrievalMs:    35.125,
			GenTTFTMs:      377.201,
			LLMPrefillMs:   365.9,
			OverheadMs:     ptr(0.401),
			ReasoningMs:    ptr(0.25),
			RetrievalShare: ptr(35.125 / 412.731),
			PrefillShare:   ptr(365.9 / 412.731),
			Usage:          ragtime.Usage{PromptTokens: 2048, CompletionTokens: 180, CachedTokens: new(1024), ReasoningTokens: 12, CacheCreationTokens: 512},
		},
	}
}

// failedRecord is a query that failed before a first token: nil pointers,
// empty optional strings, no upstream status, empty (not nil) attrs.
func failedRecord() ragtime.Record {
	return ragtime.Record{
		QueryID:        uuid.NewString(),
		CreatedAt:      time.Date(2025, 3, 2, 8, 30, 0, 123456000, time.UTC),
		QuestionSHA256: strings.Repeat("ab", 32),
		TopK:           3,
		Model:          "gpt-x",
		Provider:       "openai",
		Status:         ragtime.StatusError,
		ErrorCode:      "llm_auth",
		ErrorMessage:   "the provider refused the API key",
		Stages: []ragtime.Span{
			{Name: ragtime.StageEmbed, Seq: 0, StartMs: 0, DurationMs: 10.5},
			{Name: ragtime.StageSearch, Seq: 1, StartMs: 10.5, DurationMs: 9.75, Attrs: map[string]any{}},
		},
		Figures: ragtime.Figures{
			E2EMs:       120.5,
			RetrievalMs: 20.25,
		},
	}
}

// panicMarshaler is an attribute value whose JSON encoding panics.
type panicMarshaler struct{}

func (panicMarshaler) MarshalJSON() ([]byte, error) { panic("boom") }

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// equalRecords compares a stored record with the one recorded.
func equalRecords(t *testing.T, got, want ragtime.Record) {
	t.Helper()
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	got.CreatedAt, want.CreatedAt = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stored record differs:\n got %+v\nwant %+v", got, want)
	}
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctxFor(t), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// waitFor polls cond until it holds; it fails the test after a generous
// limit (a hang, not a timing assertion).
// proxiedPool makes a fresh migrated database and a pool on it through a
// Proxy that can cut it away; it returns the database's own URL too.
func proxiedPool(t *testing.T) (string, *postgrestest.Proxy, *pgxpool.Pool) {
	t.Helper()
	u := postgrestest.NewDatabase(t)
	proxy := postgrestest.NewProxy(t, postgrestest.HostPort(t, u))
	pool, err := postgres.Open(ctxFor(t), proxy.URL(u))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return u, proxy, pool
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	u := postgrestest.NewEmptyDatabase(t)
	pool, err := postgres.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			if i%2 == 0 {
				errs[i] = postgres.Migrate(ctx, pool)
			} else {
				errs[i] = postgres.MigrateURL(ctx, u)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent migrate %d: %v", i, err)
		}
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	var applied int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if applied != len(files) {
		t.Errorf("applied migrations = %d, want %d (each once)", applied, len(files))
	}
	for _, table := range []string{"queries", "query_stages", "ttft_breakdown"} {
		if n := countRows(t, pool, table); n != 0 {
			t.Errorf("%s has %d rows, want 0", table, n)
		}
	}
}

func TestEnsureDatabase(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	// A database name that needs quoting.
	base := postgrestest.NewEmptyDatabase(t)
	name := "Ragtime Ensure " + uuid.NewString()[:8]
	parsed, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	parsed.Path = "/" + name
	target := parsed.String()

	admin, err := postgres.Open(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})

	for i := range 2 {
		if err := postgres.EnsureDatabase(ctx, target); err != nil {
			t.Fatalf("EnsureDatabase #%d: %v", i+1, err)
		}
	}
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		t.Fatalf("database %q was not created", name)
	}
	pool, err := postgres.Open(ctx, target)
	if err != nil {
		t.Fatalf("open the created database: %v", err)
	}
	pool.Close()
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	// Nothing listens on a port we just closed.
	proxy := postgrestest.NewProxy(t, "127.0.0.1:1")
	addr := proxy.Addr()
	u := "postgres://postgres:s3cret@" + addr + "/ragtime?sslmode=disable&connect_timeout=5"
	proxy.Cut()

	dead := "postgres://postgres:s3cret@127.0.0.1:1/ragtime?sslmode=disable&connect_timeout=5"
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"EnsureDatabase", func() error { return postgres.EnsureDatabase(ctx, dead) }},
		{"Open", func() error { _, err := postgres.Open(ctx, dead); return err }},
		{"MigrateURL", func() error { return postgres.MigrateURL(ctx, dead) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, postgres.ErrUnreachable) {
				t.Fatalf("error = %v, want ErrUnreachable", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "cannot reach PostgreSQL at 127.0.0.1:1 (") || !strings.HasSuffix(msg, postgres.Hint(err)) ||
				!strings.Contains(msg, "nothing listens there") && !strings.Contains(msg, "a PostgreSQL answers on port") {
				t.Errorf("message = %q, want \"cannot reach PostgreSQL at 127.0.0.1:1 (…): <hint>\"", msg)
			}
			if strings.Contains(msg, "\n") || strings.Contains(msg, "s3cret") {
				t.Errorf("message must be one line without the password: %q", msg)
			}
		})
	}
	// A server that accepts and hangs up is not "unreachable", but the
	// error must still not carry the password.
	if err := postgres.EnsureDatabase(ctx, u); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("EnsureDatabase through a cut proxy: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db":                             "postgres://u@h/db",
		"postgres://h/db?password=secret":               "postgres://h/db?password=xxxxx",
		"host=h user=u password=secret dbname=db":       "host=h user=u password=xxxxx dbname=db",
	} {
		if got := postgres.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRecorderRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{BatchSize: 4, FlushInterval: 10 * time.Millisecond, Logger: quietLogger()})
	want := []ragtime.Record{failedRecord()}
	for i := range 9 {
		want = append(want, record(i))
	}
	cancelled := record(99)
	cancelled.Status, cancelled.ErrorCode, cancelled.ErrorMessage = ragtime.StatusCancelled, ragtime.CodeCancelled, "client went away"
	cancelled.TTFTMs, cancelled.OverheadMs, cancelled.RetrievalShare, cancelled.PrefillShare, cancelled.ConnReused = nil, nil, nil, nil, ptr(false)
	cancelled.Question, cancelled.Stages = "", nil
	want = append(want, cancelled)
	for _, r := range want {
		rec.Record(r)
	}
	if err := rec.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st := rec.Stats(); st != (ragtime.RecorderStats{Written: int64(len(want))}) {
		t.Errorf("Stats = %+v, want only Written %d", st, len(want))
	}

	store := postgres.NewStore(pool)
	for _, w := range want {
		got, err := store.GetQuery(ctx, w.QueryID)
		if err != nil {
			t.Fatalf("GetQuery(%s): %v", w.QueryID, err)
		}
		equalRecords(t, got, w)
	}
	// Upper case ids are found too, and come back canonical.
	got, err := store.GetQuery(ctx, strings.ToUpper(want[1].QueryID))
	if err != nil || got.QueryID != want[1].QueryID {
		t.Errorf("GetQuery(upper case) = %q, %v", got.QueryID, err)
	}

	// NULL columns and the view, straight from SQL.
	var question, errorCode, requestID *string
	var upstream *int
	var ttft, serverQueue, serverPrefill, serverLoad *float64
	err = pool.QueryRow(ctx, `SELECT question, error_code, request_id, upstream_status, ttft_ms,
		server_queue_ms, server_prefill_ms, server_load_ms FROM queries WHERE id = $1`,
		want[0].QueryID).Scan(&question, &errorCode, &requestID, &upstream, &ttft, &serverQueue, &serverPrefill, &serverLoad)
	if err != nil {
		t.Fatal(err)
	}
	if question != nil || requestID != nil || upstream != nil || ttft != nil || errorCode == nil {
		t.Errorf("failed query columns: question %v, request_id %v, upstream_status %v, ttft_ms %v, error_code %v",
			question, requestID, upstream, ttft, errorCode)
	}
	if serverQueue != nil || serverPrefill != nil || serverLoad != nil {
		t.Errorf("server timings not reported, yet stored: %v %v %v", serverQueue, serverPrefill, serverLoad)
	}
	var viewTTFT, viewRetrieval, share float64
	err = pool.QueryRow(ctx, `SELECT ttft_ms, retrieval_ms, retrieval_share FROM ttft_breakdown WHERE query_id = $1`,
		want[1].QueryID).Scan(&viewTTFT, &viewRetrieval, &share)
	if err != nil {
		t.Fatal(err)
	}
	// the view rounds shares to 0.0001
	if viewTTFT != *want[1].TTFTMs || viewRetrieval != want[1].RetrievalMs || math.Abs(share-*want[1].RetrievalShare) > 0.00005 {
		t.Errorf("ttft_breakdown = %v %v %v", viewTTFT, viewRetrieval, share)
	}
	if n := countRows(t, pool, "query_stages"); n != 2+9*8 {
		t.Errorf("query_stages rows = %d, want %d", n, 2+9*8)
	}
}

func TestRecorderZeroCreatedAtIsSet(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	r := record(1)
	r.CreatedAt = time.Time{}
	before := time.Now().Add(-time.Second)
	rec.Record(r)
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := postgres.NewStore(pool).GetQuery(ctx, r.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	if got.CreatedAt.Before(before) {
		t.Errorf("CreatedAt = %v, want about now", got.CreatedAt)
	}
}

func TestRecorderDuplicateIDs(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: time.Millisecond, Logger: quietLogger()})
	first := record(1)
	rec.Record(first)
	rec.Record(first) // twice in one batch
	waitFor(t, "the first batch", func() bool { return rec.Stats().Written == 2 })
	again := record(2)
	again.QueryID, again.CreatedAt = first.QueryID, first.CreatedAt
	rec.Record(again) // and again in a later batch, with other values (a query is its id at its created_at: the partition key is part of the primary key)
	other := record(3)
	rec.Record(other)
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Failed != 0 || st.Written != 4 {
		t.Errorf("Stats = %+v, want 4 written, none failed", st)
	}
	if n := countRows(t, pool, "queries"); n != 2 {
		t.Errorf("queries rows = %d, want 2", n)
	}
	if n := countRows(t, pool, "query_stages"); n != 16 {
		t.Errorf("query_stages rows = %d, want 16", n)
	}
	got, err := postgres.NewStore(pool).GetQuery(ctx, first.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, first)    // the first write wins
	checkRollupsMatchRows(t, pool) // and is counted once
}

// TestCopiedColumnTypes: the recorder writes the rows of queries and
// query_stages in COPY's binary format, each field in the representation
// of one type; a migration that changes a column's type must change what
// the recorder writes (columns.go's fieldEncoder, write.go's appendStage).
func TestCopiedColumnTypes(t *testing.T) {
	t.Parallel()
	pool := postgrestest.NewPool(t)
	for table, cols := range postgres.CopiedColumnTypes() {
		for _, col := range cols {
			var typ string
			if err := pool.QueryRow(ctxFor(t), `SELECT data_type FROM information_schema.columns
				WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2`, table, col[0]).Scan(&typ); err != nil {
				t.Fatalf("column %s.%s: %v", table, col[0], err)
			}
			if typ != col[1] {
				t.Errorf("%s.%s is %s; the recorder writes %s", table, col[0], typ, col[1])
			}
		}
	}
}

func TestRecorderInvalidRecordsAreFailedNotBlocking(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{BatchSize: 50, FlushInterval: time.Millisecond, Logger: quietLogger()})

	badStatus := record(0)
	badStatus.Status = "weird" // violates the CHECK
	badID := record(0)
	badID.QueryID = "not-a-uuid"
	badUTF8 := record(0)
	badUTF8.Model = "bad \xff utf-8"
	badAttrs := record(0)
	badAttrs.Stages[1].Attrs = map[string]any{"fn": func() {}}
	dupSeq := record(0)
	dupSeq.Stages[2].Seq = 1
	tooBig := record(0)
	tooBig.TopK = 1 << 40
	nulInJSON := record(0)
	nulInJSON.Stages[1].Attrs = map[string]any{"s": "a\x00b"}
	panicky := record(0)
	panicky.Stages[3].Attrs = map[string]any{"p": panicMarshaler{}}
	bad := []ragtime.Record{badStatus, badID, badUTF8, badAttrs, dupSeq, tooBig, nulInJSON, panicky}

	var good []ragtime.Record
	for i := range 20 {
		r := record(i)
		good = append(good, r)
		rec.Record(r)
		if i < len(bad) {
			rec.Record(bad[i])
		}
	}
	waitFor(t, "the first records", func() bool { st := rec.Stats(); return st.Queued == 0 })
	later := record(100)
	rec.Record(later)
	good = append(good, later)
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := rec.Stats()
	if st.Failed != int64(len(bad)) || st.Written != int64(len(good)) || st.Dropped != 0 {
		t.Errorf("Stats = %+v, want %d failed, %d written", st, len(bad), len(good))
	}
	if n := countRows(t, pool, "queries"); n != len(good) {
		t.Errorf("queries rows = %d, want %d", n, len(good))
	}
	store := postgres.NewStore(pool)
	for _, w := range good {
		got, err := store.GetQuery(ctx, w.QueryID)
		if err != nil {
			t.Fatalf("GetQuery: %v", err)
		}
		equalRecords(t, got, w)
	}
}

// TestRecorderSurvivesOutage cuts PostgreSQL away while records arrive:
// nothing within the bound is lost, and all of it appears after Restore.
func TestRecorderSurvivesOutage(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	_, proxy, pool := proxiedPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
		QueueSize: 1000, BatchSize: 16, FlushInterval: time.Millisecond, RetryBackoff: 20 * time.Millisecond, Logger: quietLogger(),
	})

	var want []ragtime.Record
	for i := range 40 {
		r := record(i)
		want = append(want, r)
		rec.Record(r)
	}
	waitFor(t, "the first records", func() bool { return rec.Stats().Written == 40 })

	proxy.Cut()
	for i := 40; i < 400; i++ {
		r := record(i)
		want = append(want, r)
		rec.Record(r)
	}
	waitFor(t, "retries while PostgreSQL is away", func() bool { return rec.Stats().Retries >= 3 })
	for i := 400; i < 500; i++ {
		r := record(i)
		want = append(want, r)
		rec.Record(r)
	}
	if st := rec.Stats(); st.Queued != 460 || st.Dropped != 0 || st.Failed != 0 {
		t.Errorf("during the outage Stats = %+v, want 460 queued, none dropped or failed", st)
	}
	proxy.Restore()
	waitFor(t, "the backlog", func() bool { return rec.Stats().Written == 500 })
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Dropped != 0 || st.Failed != 0 || st.Queued != 0 {
		t.Errorf("Stats = %+v", st)
	}
	if n := countRows(t, pool, "queries"); n != 500 {
		t.Fatalf("queries rows = %d, want 500", n)
	}
	if n := countRows(t, pool, "query_stages"); n != 500*8 {
		t.Fatalf("query_stages rows = %d, want %d", n, 500*8)
	}
	store := postgres.NewStore(pool)
	for i := 0; i < len(want); i += 37 {
		got, err := store.GetQuery(ctx, want[i].QueryID)
		if err != nil {
			t.Fatal(err)
		}
		equalRecords(t, got, want[i])
	}
}

// TestRecorderBoundExceeded fills the queue while PostgreSQL is away: what
// does not fit is counted dropped, the rest is written after Restore.
func TestRecorderBoundExceeded(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	_, proxy, pool := proxiedPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
		QueueSize: 10, BatchSize: 4, FlushInterval: time.Millisecond, RetryBackoff: 20 * time.Millisecond, Logger: quietLogger(),
	})
	proxy.Cut()
	for i := range 25 {
		rec.Record(record(i))
	}
	if st := rec.Stats(); st.Dropped != 15 || st.Queued != 10 {
		t.Errorf("Stats = %+v, want 15 dropped, 10 queued", st)
	}
	proxy.Restore()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Dropped != 15 || st.Written != 10 {
		t.Errorf("Stats = %+v, want 15 dropped, 10 written", st)
	}
	if n := countRows(t, pool, "queries"); n != 10 {
		t.Errorf("queries rows = %d, want 10", n)
	}
}

func TestRecorderCloseFlushes(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{BatchSize: 1000, FlushInterval: time.Hour, Logger: quietLogger()})
	for i := range 300 {
		rec.Record(record(i))
	}
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, "queries"); n != 300 {
		t.Errorf("queries rows = %d, want 300", n)
	}
	// Closed: further records are dropped and counted, Close again is fine.
	rec.Record(record(1))
	if st := rec.Stats(); st.Dropped != 1 || st.Written != 300 {
		t.Errorf("Stats = %+v, want 1 dropped, 300 written", st)
	}
	if err := rec.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestRecorderLightLoadOneTransactionPerInterval: under a light, steady
// load the writers commit about one transaction per FlushInterval, not
// one more for whatever arrived while the last one committed. The
// transactions are counted in PostgreSQL, as the distinct xmin of the
// stored queries; the bound is the ticks in the time it took, and Close's.
func TestRecorderLightLoadOneTransactionPerInterval(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	const interval = 50 * time.Millisecond
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Writers: 2, BatchSize: 256, FlushInterval: interval, Logger: quietLogger()})
	start := time.Now()
	const n = 300
	for i := range n {
		rec.Record(record(i))
		time.Sleep(time.Millisecond) // a record arrives during every commit
	}
	elapsed := time.Since(start)
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := countRows(t, pool, "queries"); got != n {
		t.Fatalf("queries rows = %d, want %d", got, n)
	}
	var txns int
	if err := pool.QueryRow(ctx, "SELECT count(DISTINCT xmin::text) FROM queries").Scan(&txns); err != nil {
		t.Fatal(err)
	}
	if most := int(elapsed/interval) + 2; txns > most {
		t.Errorf("%d transactions for %d records over %s; want at most %d (one per %s and Close's)", txns, n, elapsed.Round(time.Millisecond), most, interval)
	}
}

// TestRecorderCloseDeadline closes while PostgreSQL is away: Close returns
// when its context ends, and counts what it could not write.
func TestRecorderCloseDeadline(t *testing.T) {
	t.Parallel()
	_, proxy, pool := proxiedPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: time.Millisecond, RetryBackoff: 20 * time.Millisecond, Logger: quietLogger()})
	proxy.Cut()
	for i := range 7 {
		rec.Record(record(i))
	}
	waitFor(t, "a retry", func() bool { return rec.Stats().Retries > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := rec.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "7 records not written") {
		t.Errorf("Close = %v, want 7 records not written: deadline exceeded", err)
	}
	if st := rec.Stats(); st.Dropped != 7 || st.Queued != 0 || st.Written != 0 {
		t.Errorf("Stats = %+v, want 7 dropped", st)
	}
}

// TestRecorderWaitsForSchema keeps records while the tables are missing
// (a retryable condition, not invalid data) and writes them once migrated.
func TestRecorderWaitsForSchema(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool, err := postgres.Open(ctx, postgrestest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: time.Millisecond, RetryBackoff: 20 * time.Millisecond, Logger: quietLogger()})
	rec.Record(record(1))
	waitFor(t, "a retry", func() bool { return rec.Stats().Retries > 0 })
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != 1 || st.Failed != 0 {
		t.Errorf("Stats = %+v, want 1 written", st)
	}
}

func TestRecordDoesNotBlockConcurrently(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{QueueSize: 100000, BatchSize: 64, FlushInterval: time.Millisecond, Logger: quietLogger()})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 250 {
				rec.Record(record(g*1000 + i))
			}
		})
	}
	wg.Wait()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != 2000 || st.Dropped != 0 {
		t.Errorf("Stats = %+v, want 2000 written", st)
	}
}

func TestGetQueryNotFound(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	store := postgres.NewStore(postgrestest.NewPool(t))
	for _, id := range []string{uuid.NewString(), "not-a-uuid", "", "'; DROP TABLE queries; --", strings.Repeat("a", 10000)} {
		if _, err := store.GetQuery(ctx, id); !errors.Is(err, ragtime.ErrNotFound) {
			t.Errorf("GetQuery(%.40q) = %v, want ErrNotFound", id, err)
		}
	}
	if err := store.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// TestEveryRecordFieldIsStored stores a record with every field set and
// reads it back equal: a field added to ragtime.Record without its column
// (a migration) fails the insert, and one the insert or the read misses
// comes back zero.
func TestEveryRecordFieldIsStored(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	sweepID := uuid.NewString()
	if err := postgres.NewSweeps(pool).Start(ctx, sweepID, "in-process", 1, nil); err != nil {
		t.Fatal(err)
	}
	want := pipelinetest.FullRecord(sweepID)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger()})
	rec.Record(want)
	// A missing column is retried as a schema not yet migrated: bound it.
	closeCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := rec.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v (a ragtime.Record field without its column in a migration?)", err)
	}
	if st := rec.Stats(); st.Written != 1 {
		t.Fatalf("recorder stats %+v: the full record was not written (a Record field without its column?)", st)
	}
	got, err := postgres.NewStore(pool).GetQuery(ctx, want.QueryID)
	if err != nil {
		t.Fatal(err)
	}
	equalRecords(t, got, want)
}

// TestHintFitsTheError: each way a connection fails gets its own advice,
// checked against a real server where one can produce the failure.
func TestHintFitsTheError(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	base := postgrestest.NewEmptyDatabase(t)
	withUser := func(user, db string) string {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			u.User = url.User(user)
		}
		if db != "" {
			u.Path = "/" + db
		}
		return u.String()
	}
	// When the test server answers on a port of 127.0.0.1 that LocalPorts
	// probes (5432 here), the hint for a refused local port must lead with
	// it; only a machine with no PostgreSQL found is told to start one.
	refusedLocally := "nothing listens there: start"
	if ports := postgres.LocalPorts(1); len(ports) > 0 {
		refusedLocally = fmt.Sprintf("a PostgreSQL answers on port %d", ports[0])
		if bu, err := url.Parse(base); err == nil && bu.Hostname() == "127.0.0.1" && bu.Port() == "5432" {
			refusedLocally = "a PostgreSQL answers on port 5432 of this machine, DATABASE_URL (or --database-url) says 1: put port 5432 in it"
		}
	}
	refusedRemote := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5432},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"refused locally", func() error {
			_, err := postgres.Open(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=5")
			return err
		}, refusedLocally},
		{"refused remotely", func() error { return refusedRemote }, "check the port in DATABASE_URL"},
		{"dns", func() error { return &net.DNSError{Err: "no such host", Name: "pg.invalid", IsNotFound: true} }, "does not resolve"},
		{"auth", func() error { _, err := postgres.Open(ctx, withUser("no_such_role_hint_test", "")); return err }, "refused the user or password"},
		{"database missing", func() error { _, err := postgres.Open(ctx, withUser("", "no_such_database_hint_test")); return err }, "database does not exist"},
		{"timeout", func() error { return fmt.Errorf("dial: %w", context.DeadlineExceeded) }, "no answer in time"},
	} {
		err := tc.err()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		hint := postgres.Hint(err)
		if !strings.Contains(hint, tc.want) {
			t.Errorf("%s: Hint(%v) = %q, want it to contain %q", tc.name, err, hint, tc.want)
		}
		if strings.Contains(hint, "pg_ctlcluster") && !strings.HasPrefix(tc.want, "nothing listens there") {
			t.Errorf("%s: hint %q tells to start the local cluster, which is not the problem", tc.name, hint)
		}
		if !strings.Contains(hint, "DATABASE_URL") {
			t.Errorf("%s: hint %q does not name DATABASE_URL", tc.name, hint)
		}
	}
}
