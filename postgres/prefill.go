package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"ragtime/pipeline"
)

// PrefillModel reads the prefill_model view: the live prefill model of
// every provider and model with queries in its window.
func (s *Store) PrefillModel(ctx context.Context) ([]pipeline.PrefillFit, error) {
	rows, _ := s.pool.Query(ctx, `SELECT * FROM prefill_model ORDER BY provider, model`)
	fits, err := pgx.CollectRows(rows, pgx.RowToStructByName[pipeline.PrefillFit])
	if err != nil {
		return nil, fmt.Errorf("read prefill_model: %w", err)
	}
	return fits, nil
}
