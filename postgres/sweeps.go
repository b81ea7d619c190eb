package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
)

// Sweep statuses as stored in sweeps.status.
const (
	SweepRunning     = "running"
	SweepDone        = "done"
	SweepInterrupted = "interrupted"
	SweepFailed      = "failed"
)

// Sweeps writes the sweeps table and tags queries with the sweep that made
// them. It is safe for concurrent use.
type Sweeps struct {
	pool *pgxpool.Pool
}

// NewSweeps returns a Sweeps writing through pool (a migrated database).
func NewSweeps(pool *pgxpool.Pool) *Sweeps {
	return &Sweeps{pool: pool}
}

func sweepUUID(id string) (pgtype.UUID, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return pgtype.UUID{}, fmt.Errorf("sweep id %.80q is not a UUID: %w", id, err)
	}
	return pgtype.UUID{Bytes: u, Valid: true}, nil
}

// Start stores a running sweep with its parameters (any JSON-encodable
// value). mode is "in-process" or "server".
func (s *Sweeps) Start(ctx context.Context, id, mode string, seed int64, params any) error {
	pgID, err := sweepUUID(id)
	if err != nil {
		return err
	}
	b, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("encoding the parameters of sweep %s: %w", id, err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO sweeps (id, status, mode, seed, params) VALUES ($1, $2, $3, $4, $5)`,
		pgID, SweepRunning, mode, seed, b)
	if err != nil {
		return fmt.Errorf("storing sweep %s: %w", id, err)
	}
	return nil
}

// Finish stores the sweep's final status (done, interrupted or failed) and
// its summary (any JSON-encodable value; the sweep_results view reads its
// "settings" array).
func (s *Sweeps) Finish(ctx context.Context, id, status string, summary any) error {
	pgID, err := sweepUUID(id)
	if err != nil {
		return err
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return fmt.Errorf("encoding the summary of sweep %s: %w", id, err)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE sweeps SET status = $2, summary = $3, finished_at = now() WHERE id = $1`,
		pgID, status, b)
	if err != nil {
		return fmt.Errorf("storing the summary of sweep %s: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("storing the summary of sweep %s: %w", id, ragtime.ErrNotFound)
	}
	return nil
}

// Tag marks the stored queries among queryIDs that have no sweep yet as
// made by sweep id, and returns how many it marked. A sweep against a
// running server uses it: the server records the queries as usual, and the
// sweep, which saw their ids in the stream, tags them afterwards. Ids that
// are not stored (yet) are left for a later call.
func (s *Sweeps) Tag(ctx context.Context, id string, queryIDs []string) (int64, error) {
	pgID, err := sweepUUID(id)
	if err != nil {
		return 0, err
	}
	ids := make([]pgtype.UUID, 0, len(queryIDs))
	for _, q := range queryIDs {
		u, err := uuid.Parse(q)
		if err != nil {
			return 0, fmt.Errorf("tagging queries of sweep %s: query id %.80q is not a UUID", id, q)
		}
		ids = append(ids, pgtype.UUID{Bytes: u, Valid: true})
	}
	tag, err := s.pool.Exec(ctx, `UPDATE queries SET sweep_id = $1 WHERE id = ANY($2) AND sweep_id IS NULL`, pgID, ids)
	if err != nil {
		return 0, fmt.Errorf("tagging queries of sweep %s: %w", id, err)
	}
	return tag.RowsAffected(), nil
}

// Tagged counts the queries stored with sweep id.
func (s *Sweeps) Tagged(ctx context.Context, id string) (int64, error) {
	pgID, err := sweepUUID(id)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM queries WHERE sweep_id = $1`, pgID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting queries of sweep %s: %w", id, err)
	}
	return n, nil
}
