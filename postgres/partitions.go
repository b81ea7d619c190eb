package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PartitionDaysAhead is how many days past today EnsurePartitions makes
// partitions for: a week, so that a serve that stops calling it (nothing
// running, or PostgreSQL away) still has days to spare, and the default
// partition only ever sees strays.
const PartitionDaysAhead = 7

// partitionEvery is how often a Recorder calls EnsurePartitions.
const partitionEvery = time.Hour

// EnsurePartitions makes the day partitions of queries and query_stages
// from today (UTC, by the database's clock) through PartitionDaysAhead days
// ahead that do not exist yet, and returns how many tables it made. Rows
// that had landed in the default partition for those days move into them.
// It is cheap when they all exist, and safe to call from several processes
// at once (migration 0030's create_query_partitions takes an advisory lock).
func EnsurePartitions(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var made int
	err := pool.QueryRow(ctx, ensurePartitionsSQL, PartitionDaysAhead).Scan(&made)
	if err != nil {
		return 0, fmt.Errorf("create the day partitions of queries: %w", err)
	}
	return made, nil
}

// ensurePartitionsSQL makes today's through $1 days ahead's partitions.
const ensurePartitionsSQL = `SELECT create_query_partitions((now() AT TIME ZONE 'UTC')::date,
	(now() AT TIME ZONE 'UTC')::date + $1::int)`

// dayPartition matches the names create_query_partitions gives.
var dayPartition = regexp.MustCompile(`^queries_p([0-9]{8})$`)

// dayPartitions returns the UTC days that have a partition of queries,
// oldest first.
func dayPartitions(ctx context.Context, pool *pgxpool.Pool) ([]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'queries'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("list the partitions of queries: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the partitions of queries: %w", err)
	}
	var days []time.Time
	for _, n := range names {
		m := dayPartition.FindStringSubmatch(n)
		if m == nil {
			continue // the default partition
		}
		d, err := time.Parse("20060102", m[1])
		if err != nil {
			continue
		}
		days = append(days, d)
	}
	sort.Slice(days, func(i, j int) bool { return days[i].Before(days[j]) })
	return days, nil
}

// CountOlder returns how many queries were created before cutoff and how
// many stages they hold: what Prune with the same cutoff removes.
func (s *Store) CountOlder(ctx context.Context, cutoff time.Time) (queries, stages int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM queries WHERE created_at < $1),
		(SELECT count(*) FROM query_stages WHERE created_at < $1)`, cutoff).Scan(&queries, &stages)
	if err != nil {
		return 0, 0, fmt.Errorf("count queries older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	return queries, stages, nil
}

// PruneResult says what Prune removed.
type PruneResult struct {
	// DroppedDays are the UTC days whose partitions (queries and stages)
	// were dropped whole, oldest first.
	DroppedDays []time.Time
	// Deleted counts the queries deleted row by row: those before the
	// cutoff in the day the cutoff falls in, and in the default partition.
	Deleted int64
	// Searches counts the retrieval-only queries (the searches table)
	// deleted.
	Searches int64
}

// dropLockTimeout bounds the wait for the lock a partition drop takes on
// queries (ACCESS EXCLUSIVE, held for milliseconds): a long dashboard read
// would otherwise make every insert queue behind the waiting drop. A drop
// that times out is retried, up to dropTries times.
const (
	dropLockTimeout = "2s"
	dropTries       = 5
)

// Prune removes the queries created before cutoff, with their stages. A
// day partition that lies wholly before the cutoff is dropped (queries and
// query_stages of that day, one transaction per day: milliseconds whatever
// it holds); the rows before the cutoff that remain — in the day the cutoff
// falls in, and strays in the default partition — are deleted in batches of
// batch queries (10000 when batch ≤ 0), so that no transaction holds locks
// for long. It stops at ctx's end, keeping what it already removed.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, batch int) (PruneResult, error) {
	if batch <= 0 {
		batch = 10000
	}
	var res PruneResult
	days, err := dayPartitions(ctx, s.pool)
	if err != nil {
		return res, err
	}
	for _, d := range days {
		if d.Add(24 * time.Hour).After(cutoff) {
			break
		}
		if err := s.dropDay(ctx, d); err != nil {
			return res, err
		}
		res.DroppedDays = append(res.DroppedDays, d)
	}
	for {
		tag, err := s.pool.Exec(ctx, `WITH doomed AS (
				SELECT id, created_at FROM queries WHERE created_at < $1 ORDER BY created_at LIMIT $2),
			gone_stages AS (
				DELETE FROM query_stages s USING doomed d
				WHERE s.query_id = d.id AND s.created_at = d.created_at AND s.created_at < $1)
			DELETE FROM queries q USING doomed d WHERE q.id = d.id AND q.created_at = d.created_at`, cutoff, batch)
		if err != nil {
			return res, fmt.Errorf("delete queries older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
		res.Deleted += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			break
		}
	}
	// Retrieval-only queries, in batches.
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM searches WHERE id IN (
			SELECT id FROM searches WHERE created_at < $1 LIMIT $2)`, cutoff, batch)
		if err != nil {
			return res, fmt.Errorf("delete searches older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
		res.Searches += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			break
		}
	}
	// The roll-ups of whole minutes and hours before the cutoff.
	if _, err := s.pool.Exec(ctx, `DELETE FROM query_rollups
		WHERE (span = 'minute' AND start + interval '1 minute' <= $1) OR (span = 'hour' AND start + interval '1 hour' <= $1)`, cutoff); err != nil {
		return res, fmt.Errorf("delete roll-ups older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	// Stages whose query is gone (none, unless written by hand).
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM query_stages WHERE created_at < $1 AND (query_id, created_at, seq) IN (
			SELECT query_id, created_at, seq FROM query_stages WHERE created_at < $1 LIMIT $2)`, cutoff, batch*8)
		if err != nil {
			return res, fmt.Errorf("delete stages older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
		if tag.RowsAffected() < int64(batch*8) {
			return res, nil
		}
	}
}

// dropDay drops day d's partitions of query_stages and queries in one
// transaction, retrying when the lock on the parents is not had in time.
func (s *Store) dropDay(ctx context.Context, d time.Time) error {
	suffix := "_p" + d.Format("20060102")
	var err error
	for try := 0; try < dropTries; try++ {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+dropLockTimeout+"'"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{"query_stages" + suffix}.Sanitize()+", "+
				pgx.Identifier{"queries" + suffix}.Sanitize())
			return err
		})
		if err == nil || !isLockTimeout(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("drop the partitions of %s: %w", d.Format(time.DateOnly), err)
	}
	return nil
}

// isLockTimeout reports whether err is PostgreSQL's lock_not_available
// (55P03), which lock_timeout raises.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}
