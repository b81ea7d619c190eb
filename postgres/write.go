package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/pipeline"
)

// stageColumns are the query_stages columns the writer copies.
// created_at is the query's, so that per-stage reads over a time window
// need no join (migration 0005).
var stageColumns = []string{"query_id", "seq", "name", "start_ms", "duration_ms", "attrs", "created_at"}

// row is a record turned into the values the writer sends.
type row struct {
	queryID string
	query   []any
	stages  [][]any
}

// newRow checks what PostgreSQL could not be asked to check (ids are
// UUIDs, integers fit in an int4 column, attrs encode as JSON) and returns
// the values to insert. Its errors wrap errInvalidRecord.
func newRow(rec pipeline.Record) (row, error) {
	vals, err := queryValues(&rec)
	if err != nil {
		return row{}, err
	}
	pgID := vals[idColumn] // checked to be a UUID
	r := row{queryID: rec.QueryID, query: vals, stages: make([][]any, 0, len(rec.Stages))}
	for _, s := range rec.Stages {
		if s.Seq < math.MinInt32 || s.Seq > math.MaxInt32 {
			return row{}, fmt.Errorf("%w: stage %q seq %d is out of range", errInvalidRecord, s.Name, s.Seq)
		}
		var attrs any
		if s.Attrs != nil {
			b, err := marshalAttrs(s.Attrs)
			if err != nil {
				return row{}, fmt.Errorf("%w: encode attrs of stage %q: %w", errInvalidRecord, s.Name, err)
			}
			attrs = b
		}
		r.stages = append(r.stages, []any{pgID, int32(s.Seq), s.Name, s.StartMs, s.DurationMs, attrs, rec.CreatedAt})
	}
	return r, nil
}

// marshalAttrs encodes attrs as JSON, turning a panicking MarshalJSON of
// some attribute value into an error.
func marshalAttrs(attrs map[string]any) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("encoding panicked: %v", p)
		}
	}()
	return json.Marshal(attrs)
}

// writeRows writes rows in one transaction: the queries through one
// pipelined pgx.Batch, the stages of the newly inserted ones through COPY.
func writeRows(ctx context.Context, pool *pgxpool.Pool, rows []row) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for i := range rows {
			b.Queue(insertQuery, rows[i].query...)
		}
		results := tx.SendBatch(ctx, b)
		var stages [][]any
		for i := range rows {
			var inserted bool
			err := results.QueryRow().Scan(&inserted)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // stored before
			}
			if err != nil {
				_ = results.Close()
				return fmt.Errorf("insert query %s: %w", rows[i].queryID, err)
			}
			stages = append(stages, rows[i].stages...)
		}
		if err := results.Close(); err != nil {
			return fmt.Errorf("insert queries: %w", err)
		}
		if len(stages) == 0 {
			return nil
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"query_stages"}, stageColumns, pgx.CopyFromRows(stages)); err != nil {
			return fmt.Errorf("copy query stages: %w", err)
		}
		return nil
	})
}

// isInvalidData reports whether err is about the data written rather than
// the connection or the schema: the recorder refused the record, or
// PostgreSQL raised a data exception (class 22), an integrity constraint
// violation (class 23) or a program limit (class 54, such as a value too
// large to index). Anything else (PostgreSQL away, a missing table) is worth
// retrying.
func isInvalidData(err error) bool {
	if errors.Is(err, errInvalidRecord) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}
