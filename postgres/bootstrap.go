package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaNewerError says the database has migrations applied that this
// binary does not know: a newer ragtime migrated it. Migrate refuses to
// touch such a database.
type SchemaNewerError struct {
	// DBVersion is the highest migration applied to the database.
	DBVersion int64
	// Known is the highest migration this binary has.
	Known int64
}

// Error says what to do about it.
func (e *SchemaNewerError) Error() string {
	return fmt.Sprintf("the database schema is at migration %d, newer than this ragtime knows (up to %d): run a ragtime at least as new, or point --database-url at another database",
		e.DBVersion, e.Known)
}

// Unavailable reports whether err means PostgreSQL cannot be used now but
// may be later without anyone changing ragtime's settings: nobody answers,
// the connection was closed or timed out, the server is starting up or
// shutting down, or it is out of connections. It is false for what a person
// must fix: a refused login or missing privileges (SQLSTATE classes 28 and
// 42), a schema newer than this binary, a malformed URL.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var newer *SchemaNewerError
	if errors.As(err, &newer) {
		return false
	}
	if errors.Is(err, ErrUnreachable) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "28"), strings.HasPrefix(pgErr.Code, "42"), pgErr.Code == "3D000":
			return false
		}
		return true // 57P03 starting up, 53300 too many connections, 08xxx, ...
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true // the server went away during the handshake
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded)
}

// NewPool returns a pool for databaseURL without connecting: connections
// are made when first needed, so it can be created while PostgreSQL is
// away (see Bootstrap).
func NewPool(databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// Bootstrap backoff bounds.
const (
	bootstrapFirstWait = time.Second
	bootstrapMaxWait   = 10 * time.Second
)

// Bootstrap creates (when missing) and migrates the database in the
// background for a process that started while PostgreSQL was away, trying
// again with capped backoff until it succeeds. It gives up on a database
// whose schema is newer than the binary (SchemaNewerError). Err reports
// where it stands, for a readiness check.
type Bootstrap struct {
	url  string
	pool *pgxpool.Pool
	log  *slog.Logger

	mu    sync.Mutex
	err   error // nil once done
	since time.Time

	stop context.CancelFunc
	done chan struct{}
}

// StartBootstrap starts bootstrapping the database databaseURL names into
// pool; cause is why it is not ready now (the failed first attempt). Stop
// ends it.
func StartBootstrap(databaseURL string, pool *pgxpool.Pool, cause error, log *slog.Logger) *Bootstrap {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bootstrap{url: databaseURL, pool: pool, log: log, err: cause, since: time.Now(), stop: cancel, done: make(chan struct{})}
	go b.run(ctx)
	return b
}

func (b *Bootstrap) run(ctx context.Context) {
	defer close(b.done)
	wait := bootstrapFirstWait
	attempts := 0
	for {
		if !sleep(ctx, wait) {
			return
		}
		attempts++
		err := EnsureDatabase(ctx, b.url)
		if err == nil {
			err = Migrate(ctx, b.pool)
		}
		if ctx.Err() != nil {
			return
		}
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
		var newer *SchemaNewerError
		switch {
		case err == nil:
			b.log.Info("PostgreSQL answers: database ready and migrated; spooled queries are being written",
				"unavailable_for", time.Since(b.since).Round(time.Second), "attempts", attempts)
			return
		case errors.As(err, &newer):
			b.log.Error("PostgreSQL answers but refusing to use it", "err", err)
			return
		case attempts == 1 || attempts%10 == 0:
			b.log.Warn("PostgreSQL still unavailable; finished queries go to the spool", "err", err,
				"unavailable_for", time.Since(b.since).Round(time.Second), "attempts", attempts, "next_try_in", wait)
		}
		wait = min(wait*2, bootstrapMaxWait)
	}
}

// Err is nil once the database is created and migrated, and otherwise the
// last attempt's error, saying for how long.
func (b *Bootstrap) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		return nil
	}
	return fmt.Errorf("not migrated yet (unavailable for %s): %w", time.Since(b.since).Round(time.Second), b.err)
}

// Stop ends the attempts and waits for the one running.
func (b *Bootstrap) Stop() {
	b.stop()
	<-b.done
}
