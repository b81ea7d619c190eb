package migrations_test

import (
	"context"
	"database/sql"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the pgx database/sql driver
	"github.com/pressly/goose/v3"

	"ragtime/migrations"
	"ragtime/postgres/postgrestest"
)

func TestFilesAreNumberedGooseMigrations(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no migrations embedded")
	}
	pattern := regexp.MustCompile(`^\d{4}_[a-z0-9_]+\.sql$`)
	for _, name := range names {
		if !pattern.MatchString(name) {
			t.Errorf("%s: want NNNN_name.sql", name)
		}
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"-- +goose Up", "-- +goose Down"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s: missing %q", name, want)
			}
		}
	}
}

// TestUpDownUp applies every migration to a fresh database, rolls them all
// back and applies them again, so that every Down section works.
func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", postgrestest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	objects := func() []string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables t
			JOIN pg_class c ON c.relname = t.table_name AND NOT c.relispartition
			WHERE table_schema = 'public' AND table_name <> 'goose_db_version' ORDER BY table_name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		return names
	}
	want := "api_keys,budget_outcomes,cache_hit_rate,network_health,prefill_model,queries,query_rollups,query_stages,retrieval_latency,searches,slow_queries,sweep_results,sweeps,topk_tradeoff,ttft_breakdown,ttft_tail"

	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if got := strings.Join(objects(), ","); got != want {
		t.Fatalf("after up: tables and views = %s, want %s", got, want)
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	if got := objects(); len(got) != 0 {
		t.Fatalf("after down: left %v", got)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := strings.Join(objects(), ","); got != want {
		t.Fatalf("after up again: tables and views = %s, want %s", got, want)
	}

	// Every column is documented.
	var undocumented []string
	rows, err := db.QueryContext(ctx, `SELECT c.table_name || '.' || c.column_name
		FROM information_schema.columns c
		JOIN pg_class t ON t.relname = c.table_name AND t.relkind IN ('r', 'p')
		WHERE c.table_schema = 'public' AND c.table_name IN ('queries', 'query_stages')
		AND col_description(t.oid, c.ordinal_position) IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		undocumented = append(undocumented, n)
	}
	if len(undocumented) > 0 {
		t.Errorf("columns without COMMENT: %v", undocumented)
	}
}

// TestPartitioningKeepsEveryRow migrates a database holding queries and
// stages of several days in the pre-partition schema (every migration
// before 0030) and checks that every row comes through unchanged, each in
// its day's partition, and that the views still read them.
func TestPartitioningKeepsEveryRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", postgrestest.NewEmptyDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	var before int64
	for _, s := range p.ListSources() {
		if s.Version < 30 {
			before = s.Version
		}
	}
	if _, err := p.UpTo(ctx, before); err != nil {
		t.Fatalf("up to %d: %v", before, err)
	}
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// 300 queries over 40 days (some at a day's first and last microsecond),
	// with 8 stages each for the ok ones and 4 for the others.
	exec(`INSERT INTO queries (id, created_at, question, question_sha256, top_k, rerank_top_n, max_tokens, model, provider,
		status, ttft_ms, e2e_ms, queue_ms, retrieval_ms, gen_ttft_ms, llm_prefill_ms, prompt_tokens, cached_tokens)
	SELECT gen_random_uuid(),
		CASE i % 3 WHEN 0 THEN date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - (i % 40) * interval '1 day'
		           WHEN 1 THEN date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - (i % 40) * interval '1 day' - interval '1 microsecond'
		           ELSE now() - (i % 40) * interval '1 day' - i * interval '1 minute' END,
		'q' || i, md5(i::text), 3 + i % 5, 3, 256, 'm' || (i % 2), 'llmsim',
		CASE WHEN i % 10 = 0 THEN 'error' ELSE 'ok' END, CASE WHEN i % 10 <> 0 THEN 100 + i END, 200 + i, 0, 10, 90 + i, 80 + i, 500, NULL
	FROM generate_series(1, 300) i`)
	exec(`INSERT INTO query_stages (query_id, seq, name, start_ms, duration_ms, attrs, created_at)
	SELECT q.id, s.seq, s.name, s.seq * 10, s.seq + 0.5, jsonb_build_object('k', s.seq), q.created_at
	FROM queries q CROSS JOIN (VALUES (1, 'embed'), (2, 'search'), (3, 'rerank'), (4, 'assemble'),
		(5, 'llm_connect'), (6, 'llm_prefill'), (7, 'llm_decode'), (8, 'queue')) AS s(seq, name)
	WHERE q.status = 'ok' OR s.seq <= 4`)
	// The columns the queries had before: later migrations may add some
	// (NULL in the old rows), which the digest leaves out.
	var cols string
	if err := db.QueryRowContext(ctx, `SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position)
		FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'queries'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	digest := func() (string, string) {
		t.Helper()
		var q, s string
		if err := db.QueryRowContext(ctx, `SELECT
			(SELECT count(*) || ':' || md5(string_agg(row(`+cols+`)::text, ',' ORDER BY id)) FROM queries q),
			(SELECT count(*) || ':' || md5(string_agg(s::text, ',' ORDER BY query_id, seq)) FROM query_stages s)`).Scan(&q, &s); err != nil {
			t.Fatal(err)
		}
		return q, s
	}
	wantQ, wantS := digest()
	var wantTail int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ttft_tail").Scan(&wantTail); err != nil {
		t.Fatal(err)
	}

	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	if gotQ, gotS := digest(); gotQ != wantQ || gotS != wantS {
		t.Errorf("after partitioning: queries %s, stages %s; want %s, %s", gotQ, gotS, wantQ, wantS)
	}
	var misplaced, defaults int
	if err := db.QueryRowContext(ctx, `SELECT
		count(*) FILTER (WHERE tableoid::regclass::text <> 'queries_p' || to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDD')),
		count(*) FILTER (WHERE tableoid::regclass::text = 'queries_default') FROM queries`).Scan(&misplaced, &defaults); err != nil {
		t.Fatal(err)
	}
	if misplaced != 0 || defaults != 0 {
		t.Errorf("%d queries outside their day's partition (%d in the default one)", misplaced, defaults)
	}
	var kind string
	if err := db.QueryRowContext(ctx, "SELECT relkind::text FROM pg_class WHERE relname = 'query_stages'").Scan(&kind); err != nil || kind != "p" {
		t.Errorf("query_stages relkind %q, %v; want p (partitioned)", kind, err)
	}
	var gotTail int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM ttft_tail").Scan(&gotTail); err != nil || gotTail != wantTail {
		t.Errorf("ttft_tail has %d rows after, %v; want %d", gotTail, err, wantTail)
	}
	var slow int
	if err := db.QueryRowContext(ctx, "SELECT count(dominant_stage) FROM slow_queries").Scan(&slow); err != nil || slow != 300 {
		t.Errorf("slow_queries found the dominant stage of %d queries, %v; want 300", slow, err)
	}
}
