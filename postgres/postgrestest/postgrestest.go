package postgrestest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/postgres"
)

// DefaultURL is the base database tests use when DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/ragtime_test?sslmode=disable"

// BaseURL returns DATABASE_URL, or DefaultURL when it is unset.
func BaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// NewDatabase creates a fresh, uniquely named database on the server of
// BaseURL, applies the migrations to it and returns its URL; t.Cleanup drops
// it (WITH (FORCE), so open connections do not keep it). It first makes sure
// the server answers (starting the local cluster with pg_ctlcluster when it
// is down and installed) and that the base database exists; when PostgreSQL
// cannot be reached it fails the test with postgres.Hint's advice, never skips.
func NewDatabase(t testing.TB) string {
	t.Helper()
	u := NewEmptyDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := postgres.MigrateURL(ctx, u); err != nil {
		t.Fatalf("migrate test database: %v", err)
	}
	return u
}

// NewPool is NewDatabase returning a pool connected to the new database,
// closed in t.Cleanup before the database is dropped.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := postgres.Open(ctx, u)
	if err != nil {
		t.Fatalf("open test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewEmptyDatabase is NewDatabase without the migrations.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ensureServer(ctx, base); err != nil {
		t.Fatalf("postgres for tests: %v", err)
	}
	if err := postgres.EnsureDatabase(ctx, base); err != nil {
		t.Fatalf("ensure base test database: %v", err)
	}

	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatalf("parse DATABASE_URL: %v", err)
	}
	name := uniqueName(cfg.Database, t.Name())
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to base test database: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() { dropDatabase(t, cfg, name) })
	return withDatabase(base, name)
}

// dropDatabase drops name, ending its open connections.
func dropDatabase(t testing.TB, cfg *pgx.ConnConfig, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Errorf("connect to drop test database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("drop test database %s: %v", name, err)
	}
}

// uniqueName builds a database name from the base name, the test name and
// random bits, within PostgreSQL's 63-byte limit.
func uniqueName(base, test string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '_'
	}, test)
	if base == "" {
		base = "ragtime_test"
	}
	if len(base) > 20 {
		base = base[:20]
	}
	if len(clean) > 28 {
		clean = clean[:28]
	}
	return base + "_" + clean + "_" + hex.EncodeToString(b[:])
}

// withDatabase returns databaseURL naming the database name instead.
func withDatabase(databaseURL, name string) string {
	u, err := url.Parse(databaseURL)
	if err != nil || u.Scheme == "" {
		return databaseURL + " dbname=" + name
	}
	u.Path = "/" + name
	return u.String()
}

var (
	startMu      sync.Mutex
	startedOnce  bool
	startFailure error
)

// ensureServer checks the server of databaseURL answers, and when it does
// not, starts the local cluster once per process with pg_ctlcluster (when
// installed) and waits for it.
func ensureServer(ctx context.Context, databaseURL string) error {
	err := ping(ctx, databaseURL)
	if err == nil || !errors.Is(err, postgres.ErrUnreachable) {
		return nil // reachable; other errors surface with more context later
	}
	startMu.Lock()
	defer startMu.Unlock()
	if !startedOnce {
		startedOnce = true
		startFailure = startCluster(ctx)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err = ping(ctx, databaseURL)
		if err == nil || !errors.Is(err, postgres.ErrUnreachable) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if startFailure != nil {
				return fmt.Errorf("%w (starting the local cluster failed: %v)", err, startFailure)
			}
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ping connects to the maintenance database of databaseURL's server; an
// unreachable server yields an error matching postgres.ErrUnreachable.
func ping(ctx context.Context, databaseURL string) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := postgres.Open(cctx, withDatabase(databaseURL, "postgres"))
	if err != nil {
		return err
	}
	pool.Close()
	return nil
}

// startCluster runs pg_ctlcluster for every installed cluster version.
func startCluster(ctx context.Context) error {
	bin, err := exec.LookPath("pg_ctlcluster")
	if err != nil {
		return errors.New("pg_ctlcluster is not installed")
	}
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		return errors.New("no cluster under /etc/postgresql")
	}
	var errs []error
	for _, v := range versions {
		out, err := exec.CommandContext(ctx, bin, "--skip-systemctl-redirect", v.Name(), "main", "start").CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("pg_ctlcluster %s main start: %w: %s", v.Name(), err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// HostPort returns the host:port databaseURL connects to, for NewProxy.
func HostPort(t testing.TB, databaseURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	return net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
}
