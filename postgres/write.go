package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/jsontext"
	"ragtime/pipeline"
)

// stageColumns are the query_stages columns the writer copies.
// created_at is the query's, so that per-stage reads over a time window
// need no join (migration 0005).
var stageColumns = []string{"query_id", "seq", "name", "start_ms", "duration_ms", "attrs", "created_at"}

// row is a record turned into the values the writer sends.
type row struct {
	queryID string
	id      [16]byte // queryID parsed
	query   []any
	stages  [][]any
	rec     *pipeline.Record // for the roll-ups
}

// newRow checks what PostgreSQL could not be asked to check (ids are
// UUIDs, integers fit in an int4 column, attrs encode as JSON) and returns
// the values to insert. Its errors wrap errInvalidRecord.
func newRow(rec pipeline.Record) (row, error) {
	vals, err := queryValues(&rec)
	if err != nil {
		return row{}, err
	}
	pgID := vals[idColumn].(pgtype.UUID) // checked to be a UUID
	r := row{queryID: rec.QueryID, id: pgID.Bytes, query: vals, stages: make([][]any, 0, len(rec.Stages)), rec: &rec}
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
// some attribute value into an error. Attributes of the usual scalar types
// are framed without reflection (jsontext; the column is jsonb, so its
// unescaped < > & are the same value as encoding/json's \u003c…).
func marshalAttrs(attrs map[string]any) (b []byte, err error) {
	if b, ok := jsontext.AppendObject(make([]byte, 0, 128), attrs); ok {
		return b, nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("encoding panicked: %v", p)
		}
	}()
	return json.Marshal(attrs)
}

// writeRows writes rows in one transaction. Almost always none of the
// queries is stored yet, and copyRows loads both tables with COPY straight
// into queries and query_stages. When one is (a spool record replayed after
// its batch committed: the same id at the same created_at), its primary key
// refuses the COPY, and the batch is written again by moveRows, which skips
// the queries stored before. Either way a query, its stages and its share of
// the roll-ups are written once, together.
func writeRows(ctx context.Context, pool *pgxpool.Pool, rows []row) error {
	uniq := make([]*row, 0, len(rows))
	seen := make(map[[16]byte]bool, len(rows))
	for i := range rows {
		if seen[rows[i].id] {
			continue // the same query twice in a batch: the first one counts
		}
		seen[rows[i].id] = true
		uniq = append(uniq, &rows[i])
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return copyRows(ctx, tx, uniq) })
	if !isUniqueViolation(err) {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return moveRows(ctx, tx, uniq) })
}

// copyRows writes rows, none of them stored before, in three round trips
// within tx: a COPY of the queries, a COPY of their stages, and one upsert
// of their roll-ups (aggregated here, per minute and hour × provider ×
// model × stage). A query stored before fails the first COPY with a
// unique violation.
func copyRows(ctx context.Context, tx pgx.Tx, rows []*row) error {
	queries := make([][]any, len(rows))
	recs := make([]*pipeline.Record, len(rows))
	var stages [][]any
	for i, r := range rows {
		queries[i], recs[i] = r.query, r.rec
		stages = append(stages, r.stages...)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"queries"}, queryColumnNames, pgx.CopyFromRows(queries)); err != nil {
		return fmt.Errorf("copy queries: %w", err)
	}
	return insertStages(ctx, tx, stages, recs)
}

// moveRows writes rows in five round trips within tx, skipping the queries
// stored before: the queries are loaded with COPY into a session-local
// staging table and moved into queries by one INSERT … ON CONFLICT DO
// NOTHING RETURNING id (a query stored before — the same id at the same
// created_at, as a replayed spool record has — is left as it is); the
// stages and roll-ups of the queries it inserted follow as in copyRows.
func moveRows(ctx context.Context, tx pgx.Tx, rows []*row) error {
	queries := make([][]any, len(rows))
	byID := make(map[[16]byte]*row, len(rows))
	for i, r := range rows {
		queries[i] = r.query
		byID[r.id] = r
	}
	if _, err := tx.Exec(ctx, stagingTable); err != nil {
		return fmt.Errorf("create the staging table: %w", err)
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"queries_in"}, queryColumnNames, pgx.CopyFromRows(queries)); err != nil {
		return fmt.Errorf("copy queries: %w", err)
	}
	ids, err := tx.Query(ctx, moveStaged)
	if err != nil {
		return fmt.Errorf("insert queries: %w", err)
	}
	var stages [][]any
	inserted := make([]*pipeline.Record, 0, len(queries))
	var id pgtype.UUID
	_, err = pgx.ForEachRow(ids, []any{&id}, func() error {
		if r := byID[id.Bytes]; r != nil {
			stages = append(stages, r.stages...)
			inserted = append(inserted, r.rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert queries: %w", err)
	}
	return insertStages(ctx, tx, stages, inserted)
}

// insertStages copies the stages of the queries just inserted (recs)
// straight into query_stages and adds recs to the roll-ups. The stages skip
// a staging table: they are most of the rows, and their queries are new.
func insertStages(ctx context.Context, tx pgx.Tx, stages [][]any, recs []*pipeline.Record) error {
	if len(stages) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"query_stages"}, stageColumns, pgx.CopyFromRows(stages)); err != nil {
			return fmt.Errorf("copy query stages: %w", err)
		}
	}
	if len(recs) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, upsertRollups, rollupArgs(rollupsOf(recs))...); err != nil {
		return fmt.Errorf("add to the roll-ups: %w", err)
	}
	return nil
}

// isUniqueViolation reports whether err is PostgreSQL refusing a row whose
// key is taken (SQLSTATE 23505).
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// queryColumnNames are queryColumns' names, for COPY.
var queryColumnNames = func() []string {
	names := make([]string, len(queryColumns))
	for i, c := range queryColumns {
		names[i] = c.name
	}
	return names
}()

// stagingTable creates the connection's staging table on first use:
// temporary (no WAL, private to the session), emptied at every commit,
// with the written columns' types and no constraints (the move checks).
var stagingTable = "CREATE TEMP TABLE IF NOT EXISTS queries_in ON COMMIT DELETE ROWS AS SELECT " +
	strings.Join(queryColumnNames, ", ") + " FROM queries WITH NO DATA"

// moveStaged moves the staged queries into queries, returning the ids of
// those that were not stored before.
var moveStaged = "INSERT INTO queries (" + strings.Join(queryColumnNames, ", ") + ") SELECT " +
	strings.Join(queryColumnNames, ", ") + " FROM queries_in ON CONFLICT (id, created_at) DO NOTHING RETURNING id"

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
