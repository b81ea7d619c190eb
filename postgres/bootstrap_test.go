package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// TestMigrateRefusesNewerSchema: a database a newer ragtime migrated (a
// version beyond this binary's last) is refused with a message saying what
// to do, and left as it is.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	if _, err := pool.Exec(ctx, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)"); err != nil {
		t.Fatal(err)
	}
	err := postgres.Migrate(ctx, pool)
	var newer *postgres.SchemaNewerError
	if !errors.As(err, &newer) || newer.DBVersion != 99999 || newer.Known < 1 {
		t.Fatalf("Migrate = %v, want a SchemaNewerError at 99999", err)
	}
	if want := "newer than this ragtime knows"; !strings.Contains(err.Error(), want) {
		t.Errorf("message %q does not say %q", err, want)
	}
}

// TestBootstrapMigratesWhenPostgresAnswers starts while the database
// neither answers nor exists: Err says so; once PostgreSQL answers, the
// database is created and migrated and Err is nil.
func TestBootstrapMigratesWhenPostgresAnswers(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	u := postgrestest.NewEmptyDatabase(t)
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	// Drop it: Bootstrap must create it (the cleanup's DROP IF EXISTS
	// removes what Bootstrap made).
	admin, err := pgx.Connect(ctx, postgrestest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	admin.Close(context.Background())

	proxy := postgrestest.NewProxy(t, postgrestest.HostPort(t, u))
	proxy.Cut()
	pu := proxy.URL(u)
	_, openErr := postgres.Open(ctx, pu)
	if !postgres.Unavailable(openErr) {
		t.Fatalf("Open through the cut proxy = %v", openErr)
	}
	pool, err := postgres.NewPool(pu)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b := postgres.StartBootstrap(pu, pool, openErr, quietLogger())
	defer b.Stop()
	if err := b.Err(); !postgres.Unavailable(err) {
		t.Errorf("Err while cut = %v", err)
	}
	proxy.Restore()
	waitFor(t, "the database to be created and migrated", func() bool { return b.Err() == nil })
	if n := countRows(t, pool, "queries"); n != 0 {
		t.Errorf("queries rows = %d", n)
	}
}

// TestUnavailable separates what passes by itself (serve starts and waits)
// from what a person must fix (serve refuses).
func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&postgres.UnreachableError{Addr: "127.0.0.1:5432", Err: errors.New("connection refused")}, true},
		{fmt.Errorf("connect: %w", io.ErrUnexpectedEOF), true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{&pgconn.PgError{Code: "53300", Message: "too many connections"}, true},
		{fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28P01", Message: "password authentication failed"}), false},
		{&pgconn.PgError{Code: "42501", Message: "permission denied to create database"}, false},
		{&postgres.SchemaNewerError{DBVersion: 99, Known: 6}, false},
		{errors.New("parse database url: bad"), false},
		{nil, false},
	} {
		if got := postgres.Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
