package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
)

// Store reads stored queries for the API and dashboards.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store reading through pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool}
}

// Ping checks that the database answers, for readiness probes.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// selectStages reads a query's stages from the one partition of its day:
// a stage's created_at is its query's.
const selectStages = `SELECT seq, name, start_ms, duration_ms, attrs
FROM query_stages WHERE query_id = $1 AND created_at = $2 ORDER BY seq`

// idWindow is where a query made with a time-ordered id (UUIDv7, see
// pipeline.NewQueryID) has its created_at: the query's t0, which is the
// request's arrival and comes before the id is made by the queue wait and
// the parsing, so a little before the id's millisecond. Reading the id with
// created_at in this window lets PostgreSQL scan the one day partition
// (two when the window straddles midnight) instead of every partition.
const (
	idWindowBefore = 15 * time.Minute
	idWindowAfter  = time.Minute
)

// idWindow returns the created_at range to look for id in, and false when
// the id carries no time (a random v4 id, as made before v7).
func idWindow(id uuid.UUID) (lo, hi time.Time, ok bool) {
	if id.Version() != 7 {
		return time.Time{}, time.Time{}, false
	}
	sec, nsec := id.Time().UnixTime()
	at := time.Unix(sec, nsec)
	return at.Add(-idWindowBefore), at.Add(idWindowAfter), true
}

// GetQuery returns the stored query id with its stages ordered by seq, or
// ErrNotFound.
//
// What comes back equals what was recorded, except: QueryID is in canonical
// lower-case form; CreatedAt is in UTC, rounded to the microsecond and
// without a monotonic clock reading; a query without stages has nil Stages;
// and Attrs values are JSON-decoded (numbers are float64, objects
// map[string]any, arrays []any), while nil Attrs stay nil.
func (s *Store) GetQuery(ctx context.Context, id string) (ragtime.Record, error) {
	parsed, err := uuid.Parse(id)
	if err != nil {
		return ragtime.Record{}, ragtime.ErrNotFound
	}
	pgID := pgtype.UUID{Bytes: parsed, Valid: true}

	var rec ragtime.Record
	targets, scanned := scanTargets(&rec)
	err = pgx.ErrNoRows
	if lo, hi, ok := idWindow(parsed); ok {
		err = s.pool.QueryRow(ctx, selectQuery, pgID, lo, hi).Scan(targets...)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		// A v4 id, or a record whose created_at is not its id's time (a
		// caller that set its own): one index probe per partition.
		err = s.pool.QueryRow(ctx, selectQueryAnywhere, pgID).Scan(targets...)
	}
	scanned()
	if errors.Is(err, pgx.ErrNoRows) {
		return ragtime.Record{}, ragtime.ErrNotFound
	}
	if err != nil {
		return ragtime.Record{}, fmt.Errorf("read query %s: %w", parsed, err)
	}
	rec.CreatedAt = rec.CreatedAt.UTC()

	rows, err := s.pool.Query(ctx, selectStages, pgID, rec.CreatedAt)
	if err != nil {
		return ragtime.Record{}, fmt.Errorf("read stages of query %s: %w", parsed, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sp ragtime.Span
		var attrs []byte
		if err := rows.Scan(&sp.Seq, &sp.Name, &sp.StartMs, &sp.DurationMs, &attrs); err != nil {
			return ragtime.Record{}, fmt.Errorf("read stages of query %s: %w", parsed, err)
		}
		if attrs != nil {
			if err := json.Unmarshal(attrs, &sp.Attrs); err != nil {
				return ragtime.Record{}, fmt.Errorf("decode attrs of stage %q of query %s: %w", sp.Name, parsed, err)
			}
		}
		rec.Stages = append(rec.Stages, sp)
	}
	if err := rows.Err(); err != nil {
		return ragtime.Record{}, fmt.Errorf("read stages of query %s: %w", parsed, err)
	}
	return rec, nil
}
