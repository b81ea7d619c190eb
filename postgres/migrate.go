package postgres

import (
	"context"
	"database/sql"
	"fmt"
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
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(advisoryLocker{id: migrationLockID}),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
		// Version numbers are handed out per change made in parallel, so a
		// database may have a later one applied before an earlier one
		// lands (0008 before 0006); apply the missing one rather than fail.
		goose.WithAllowOutofOrder(true),
	)
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if err := refuseNewer(ctx, provider); err != nil {
		return err
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	var made int
	err = db.QueryRowContext(ctx, ensurePartitionsSQL, PartitionDaysAhead).Scan(&made)
	if err != nil {
		return fmt.Errorf("create the day partitions of queries: %w", err)
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
