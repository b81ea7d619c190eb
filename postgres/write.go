package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/internal/jsonappend"
)

// stageColumns are the query_stages columns the writer copies, in the
// order and with the types appendStage writes (migration 0001 and 0005;
// TestCopiedColumnTypes checks them). created_at is the query's, so that
// per-stage reads over a time window need no join (migration 0005).
var stageColumns = []string{"query_id", "seq", "name", "start_ms", "duration_ms", "attrs", "created_at"}

// The COPY statements of the rows appendQueryRow and appendStage write.
var (
	copyQueries   = "COPY queries (" + strings.Join(queryColumnNames, ", ") + ") FROM STDIN BINARY"
	copyQueriesIn = "COPY queries_in (" + strings.Join(queryColumnNames, ", ") + ") FROM STDIN BINARY"
	copyStages    = "COPY query_stages (" + strings.Join(stageColumns, ", ") + ") FROM STDIN BINARY"
)

// row is a record turned into the values the writer sends.
type row struct {
	queryID string
	id      [16]byte        // queryID parsed
	query   []byte          // the queries row in COPY's binary format
	stages  []byte          // the stage rows in COPY's binary format
	rec     *ragtime.Record // for the roll-ups
}

// appendRow checks what PostgreSQL could not be asked to check (ids are
// UUIDs, integers fit in an int4 column, attrs encode as JSON), appends
// rec's queries row and then its stage rows to buf in COPY's binary format,
// and returns the longer buf, the row without its two slices (which the
// caller cuts from buf: the queries row ends at q, the stage rows run from
// there to the end; the row keeps rec for the roll-ups) and an error
// wrapping errInvalidRecord. On error the caller's buf may hold a partial
// row past its old length.
func appendRow(buf []byte, rec *ragtime.Record) (out []byte, r row, q int, err error) {
	n := len(buf)
	buf, id, err := appendQueryRow(buf, rec)
	if err != nil {
		return nil, row{}, 0, err
	}
	q = len(buf) - n
	r = row{queryID: rec.QueryID, id: id, rec: rec}
	at := copyTime(rec.CreatedAt)
	for i := range rec.Stages {
		s := &rec.Stages[i]
		if s.Seq < math.MinInt32 || s.Seq > math.MaxInt32 {
			return nil, row{}, 0, fmt.Errorf("%w: stage %q seq %d is out of range", errInvalidRecord, s.Name, s.Seq)
		}
		if buf, err = appendStage(buf, id, s, at); err != nil {
			return nil, row{}, 0, fmt.Errorf("%w: encode attrs of stage %q: %w", errInvalidRecord, s.Name, err)
		}
	}
	return buf, r, q, nil
}

// appendStage appends the query_stages row of s, a stage of the query id
// created at (copyTime), in COPY's binary format: a field count, then each
// field's length and bytes in the column's binary representation. Its
// error is the attrs' JSON encoding's.
func appendStage(b []byte, id [16]byte, s *ragtime.Span, at int64) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, uint16(len(stageColumns)))
	b = binary.BigEndian.AppendUint32(b, 16) // uuid
	b = append(b, id[:]...)
	b = binary.BigEndian.AppendUint32(b, 4) // integer
	b = binary.BigEndian.AppendUint32(b, uint32(int32(s.Seq)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Name))) // text
	b = append(b, s.Name...)
	b = binary.BigEndian.AppendUint32(b, 8) // double precision
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(s.StartMs))
	b = binary.BigEndian.AppendUint32(b, 8)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(s.DurationMs))
	if s.Attrs == nil {
		b = appendNull(b)
	} else {
		// jsonb: a version byte (1), then the JSON text.
		n := len(b)
		b = append(b, 0, 0, 0, 0, 1)
		var err error
		if b, err = appendAttrs(b, s.Attrs); err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint32(b[n:], uint32(len(b)-n-4))
	}
	b = binary.BigEndian.AppendUint32(b, 8) // timestamp with time zone
	return binary.BigEndian.AppendUint64(b, uint64(at)), nil
}

// appendAttrs appends attrs as the JSON text of a jsonb value: written by
// appendJSONB when it knows every value, else by encoding/json.
func appendAttrs(b []byte, attrs map[string]any) ([]byte, error) {
	n := len(b)
	if out, ok := appendJSONB(b, attrs); ok {
		return out, nil
	}
	j, err := marshalAttrs(attrs)
	if err != nil {
		return nil, err
	}
	return append(b[:n], j...), nil
}

// appendJSONB appends v as JSON for a jsonb column when v is nil, a scalar
// jsonappend.AppendScalar writes, or a map[string]any or []any of such
// values, nested; ok is false for any other value. Maps are written in
// their iteration order: jsonb keeps keys in an order of its own, so the
// sort encoding/json makes buys nothing here, and jsonappend's unescaped
// < > & are the same jsonb value as encoding/json's \u003c….
func appendJSONB(b []byte, v any) (out []byte, ok bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case map[string]any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '{')
		first := true
		for k, e := range x {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = jsonappend.AppendString(b, k)
			b = append(b, ':')
			if b, ok = appendJSONB(b, e); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	case []any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendJSONB(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	}
	return jsonappend.AppendScalar(b, v)
}

// marshalAttrs encodes attrs with encoding/json, turning a panicking
// MarshalJSON of some attribute value into an error.
func marshalAttrs(attrs map[string]any) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("encoding panicked: %v", p)
		}
	}()
	return json.Marshal(attrs)
}

// copyTime is t in timestamptz's binary representation, microseconds since
// 2000-01-01 UTC, computed as pgx computes it for the queries row, so that
// a stage's created_at equals its query's.
func copyTime(t time.Time) int64 {
	const unixToY2K = 946_684_800 * 1_000_000
	return t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - unixToY2K
}

// copyBinary sends rows (each the output of appendQueryRow or appendStage
// for the table stmt copies into) in COPY's binary format with stmt,
// within tx. The rows are read where they are, between the header and the
// trailer, not copied into one buffer first.
func copyBinary(ctx context.Context, tx pgx.Tx, stmt string, rows [][]byte) error {
	data := make(net.Buffers, 0, len(rows)+2)
	data = append(data, copyHeader)
	data = append(data, rows...)
	data = append(data, copyTrailer)
	_, err := tx.Conn().PgConn().CopyFrom(ctx, &data, stmt)
	return err
}

// copyHeader starts COPY's binary format: the signature, no flags, no
// header extension.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// copyTrailer ends COPY's binary format: a field count of -1.
var copyTrailer = []byte{0xff, 0xff}

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
	queries := make([][]byte, len(rows))
	recs := make([]*ragtime.Record, len(rows))
	stages := make([][]byte, len(rows))
	for i, r := range rows {
		queries[i], recs[i], stages[i] = r.query, r.rec, r.stages
	}
	if err := copyBinary(ctx, tx, copyQueries, queries); err != nil {
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
	queries := make([][]byte, len(rows))
	byID := make(map[[16]byte]*row, len(rows))
	for i, r := range rows {
		queries[i] = r.query
		byID[r.id] = r
	}
	if _, err := tx.Exec(ctx, stagingTable); err != nil {
		return fmt.Errorf("create the staging table: %w", err)
	}
	if err := copyBinary(ctx, tx, copyQueriesIn, queries); err != nil {
		return fmt.Errorf("copy queries: %w", err)
	}
	ids, err := tx.Query(ctx, moveStaged)
	if err != nil {
		return fmt.Errorf("insert queries: %w", err)
	}
	var stages [][]byte
	inserted := make([]*ragtime.Record, 0, len(queries))
	var id pgtype.UUID
	_, err = pgx.ForEachRow(ids, []any{&id}, func() error {
		if r := byID[id.Bytes]; r != nil {
			stages = append(stages, r.stages)
			inserted = append(inserted, r.rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert queries: %w", err)
	}
	return insertStages(ctx, tx, stages, inserted)
}

// insertStages copies the stages of the queries just inserted (recs, each
// one's rows in stages) straight into query_stages and adds recs to the
// roll-ups. The stages skip a staging table: they are most of the rows,
// and their queries are new.
func insertStages(ctx context.Context, tx pgx.Tx, stages [][]byte, recs []*ragtime.Record) error {
	if len(stages) > 0 {
		if err := copyBinary(ctx, tx, copyStages, stages); err != nil {
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
