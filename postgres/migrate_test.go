package postgres_test

import (
	"context"
	"database/sql"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the pgx database/sql driver
	"github.com/pressly/goose/v3"

	"ragtime/migrations"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// openEmpty returns a connection to a new database with nothing in it.
func openEmpty(t *testing.T) (string, *sql.DB) {
	t.Helper()
	u := postgrestest.NewEmptyDatabase(t)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return u, db
}

// appliedOrder returns the versions goose recorded, in the order they were
// applied (its version table's id).
func appliedOrder(ctx context.Context, t *testing.T, db *sql.DB) []int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT version_id FROM goose_db_version WHERE version_id > 0 AND is_applied ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

// embeddedVersions returns the versions of the embedded migrations, in order.
func embeddedVersions(t *testing.T) []int64 {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, n := range names {
		v, err := strconv.ParseInt(n[:4], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// without returns the embedded migrations but those of the given versions.
func without(t *testing.T, drop ...string) fs.FS {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, n := range names {
		if slices.ContainsFunc(drop, func(d string) bool { return strings.HasPrefix(n, d+"_") }) {
			continue
		}
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = &fstest.MapFile{Data: b}
	}
	return out
}

// TestMigrateAppliesInOrder: a fresh database gets every migration, each
// after the one numbered before it.
func TestMigrateAppliesInOrder(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, db := openEmpty(t)
	if err := postgres.MigrateURL(ctx, u); err != nil {
		t.Fatal(err)
	}
	if got, want := appliedOrder(ctx, t, db), embeddedVersions(t); !slices.Equal(got, want) {
		t.Errorf("applied %v, want %v in this order", got, want)
	}
}

// TestMigrateOpensDatabasesMigratedOutOfOrder: the databases the old code
// (goose with out-of-order allowed) left — one that got 0006 after 0010,
// one migrated by a build that had 0008 and not yet 0006 — are migrated to
// the end by the new code, the missing one applied.
func TestMigrateOpensDatabasesMigratedOutOfOrder(t *testing.T) {
	t.Parallel()
	all := embeddedVersions(t)
	for _, tc := range []struct {
		name   string
		oldRun bool // whether the old code applied 0006 afterwards, out of order
	}{{"applied out of order", true}, {"lacking one", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			u, db := openEmpty(t)
			before, err := goose.NewProvider(goose.DialectPostgres, db, without(t, "0006"), goose.WithDisableGlobalRegistry(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := before.UpTo(ctx, 10); err != nil {
				t.Fatal(err)
			}
			if tc.oldRun {
				old, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
					goose.WithDisableGlobalRegistry(true), goose.WithAllowOutofOrder(true))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := old.UpTo(ctx, 10); err != nil {
					t.Fatal(err)
				}
				if got := appliedOrder(ctx, t, db); got[len(got)-1] != 6 {
					t.Fatalf("setup: applied %v, want 6 last", got)
				}
			}
			if err := postgres.MigrateURL(ctx, u); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			got := appliedOrder(ctx, t, db)
			slices.Sort(got)
			if !slices.Equal(got, all) {
				t.Errorf("applied %v, want %v", got, all)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'queries' AND column_name = 'server_prefill_ms'").Scan(&n); err != nil || n != 1 {
				t.Errorf("0006's column: %d, %v", n, err)
			}
		})
	}
}

// TestMigrateRefusesAGapAfterTheParallelNumbers: past the numbers handed
// out in parallel, a database that lacks a migration below its version is
// refused, not patched out of order.
func TestMigrateRefusesAGapAfterTheParallelNumbers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, db := openEmpty(t)
	mig := func(sql string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte("-- +goose Up\n" + sql + ";\n-- +goose Down\nSELECT 1;\n")}
	}
	v1, v2, v3 := "0001_a.sql", "0101_b.sql", "0102_c.sql"
	if err := postgres.MigrateFS(ctx, db, fstest.MapFS{v1: mig("CREATE TABLE a (x int)"), v3: mig("CREATE TABLE c (x int)")}); err != nil {
		t.Fatal(err)
	}
	err := postgres.MigrateFS(ctx, db, fstest.MapFS{v1: mig("CREATE TABLE a (x int)"), v2: mig("CREATE TABLE b (x int)"), v3: mig("CREATE TABLE c (x int)")})
	if err == nil || !strings.Contains(err.Error(), "out-of-order") || !strings.Contains(err.Error(), "version 101") {
		t.Errorf("Migrate with %s missing below %s: %v, want goose's out-of-order refusal naming it", v2, v3, err)
	}
	if got := appliedOrder(ctx, t, db); !slices.Equal(got, []int64{1, 102}) {
		t.Errorf("applied %v, want [1 102]", got)
	}
}

// TestNumbersAfterTheParallelOnesFollowEachOther: every migration numbered
// after the last one handed out in parallel is the one after its
// predecessor, so that numbers are given in order from now on.
func TestNumbersAfterTheParallelOnesFollowEachOther(t *testing.T) {
	t.Parallel()
	prev := postgres.LastParallelVersion
	for _, v := range embeddedVersions(t) {
		if v <= postgres.LastParallelVersion {
			continue
		}
		if v != prev+1 {
			t.Errorf("migration %04d follows %04d: number it %04d", v, prev, prev+1)
		}
		prev = v
	}
}
