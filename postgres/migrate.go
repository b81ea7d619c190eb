package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"ragtime/migrations"
)

// migrationLockID is the session advisory lock key Migrate holds while it
// applies migrations ("ragtime" in ASCII), so that processes starting at
// once apply them one after the other. Advisory locks are per database.
const migrationLockID int64 = 0x72616774696d65

// Migrate applies the pending embedded migrations (package migrations) to
// the database pool is connected to. It is idempotent, and safe when several
// processes run it at once: they take turns under a PostgreSQL advisory lock.
// It refuses, with a *SchemaNewerError, a database a newer ragtime migrated.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return migrateDB(ctx, db)
}

// MigrateURL is Migrate for a database URL: it connects, applies the pending
// migrations and disconnects.
func MigrateURL(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return connectError(cfg, err)
	}
	return migrateDB(ctx, db)
}

func migrateDB(ctx context.Context, db *sql.DB) error {
	if err := migrateFS(ctx, db, migrations.FS); err != nil {
		return err
	}
	var made int
	err := db.QueryRowContext(ctx, ensurePartitionsSQL, PartitionDaysAhead).Scan(&made)
	if err != nil {
		return fmt.Errorf("create the day partitions of queries: %w", err)
	}
	return nil
}

// lastParallelVersion is the last migration number handed out while
// numbers were given to changes made in parallel: a database migrated by a
// build that had a later one of them and not an earlier one (0008 before
// 0006) can lack a version below its own. Every number after it is given
// in order (TestNumbersAfterTheParallelOnesFollowEachOther).
const lastParallelVersion = 36

// migrateFS applies the migrations in fsys strictly in version order: a
// fresh database gets them one after the other, and a database that lacks
// one below its version is refused (goose's "missing (out-of-order)
// migration" error) — except for the numbers up to lastParallelVersion,
// which a database may lack through no fault of its own: those are applied
// first, each on its own, and the rest in order after them.
func migrateFS(ctx context.Context, db *sql.DB, fsys fs.FS) error {
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(advisoryLocker{id: migrationLockID}),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if err := refuseNewer(ctx, provider); err != nil {
		return err
	}
	if err := fillParallelGaps(ctx, provider); err != nil {
		return err
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// fillParallelGaps applies the migrations numbered up to
// lastParallelVersion that the database lacks below its current version,
// lowest first. goose's version table keeps one row per applied version
// (in the order they were applied); the strict Up that follows only asks
// that no known version below the highest applied one is missing, whatever
// order the rows were written in, so a database the old code migrated out
// of order opens unchanged.
func fillParallelGaps(ctx context.Context, provider *goose.Provider) error {
	current, err := provider.GetDBVersion(ctx)
	if err != nil || current == 0 {
		return nil // no version table yet: a fresh database has no gaps
	}
	status, err := provider.Status(ctx)
	if err != nil {
		return fmt.Errorf("read applied migrations: %w", err)
	}
	for _, s := range status {
		v := s.Source.Version
		if s.State != goose.StatePending || v >= current || v > lastParallelVersion {
			continue
		}
		if _, err := provider.ApplyVersion(ctx, v, true); err != nil && !errors.Is(err, goose.ErrAlreadyApplied) {
			return fmt.Errorf("apply migration %d, missing below the database's %d: %w", v, current, err)
		}
	}
	return nil
}

// refuseNewer returns a *SchemaNewerError when the database has a
// migration applied beyond the last one this binary has. A database with
// no version table yet (fresh) is not newer.
func refuseNewer(ctx context.Context, provider *goose.Provider) error {
	sources := provider.ListSources()
	if len(sources) == 0 {
		return nil
	}
	known := sources[len(sources)-1].Version
	current, err := provider.GetDBVersion(ctx)
	if err != nil {
		return nil // no version table yet; Up creates it and reports real trouble
	}
	if current > known {
		return &SchemaNewerError{DBVersion: current, Known: known}
	}
	return nil
}

// advisoryLocker is a goose session locker that waits on a blocking
// pg_advisory_lock (bounded by ctx) rather than polling, so a process that
// starts while another migrates proceeds as soon as the other is done.
type advisoryLocker struct{ id int64 }

// SessionLock takes the advisory lock on conn.
func (l advisoryLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", l.id); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	return nil
}

// SessionUnlock releases the advisory lock on conn.
func (l advisoryLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", l.id); err != nil {
		return fmt.Errorf("release migration lock: %w", err)
	}
	return nil
}
