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
		rows, err := db.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
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
	want := "api_keys,cache_hit_rate,network_health,queries,query_stages,slow_queries,sweep_results,sweeps,topk_tradeoff,ttft_breakdown,ttft_tail"

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
		JOIN pg_class t ON t.relname = c.table_name AND t.relkind = 'r'
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
