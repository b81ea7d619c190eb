package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/pipeline"
)

// insertQuery inserts one query row; a query id stored before is left as it
// is (RETURNING then yields no row, and its stages are not written again).
const insertQuery = `INSERT INTO queries (
	id, created_at, question, question_sha256, top_k, rerank_top_n, max_tokens,
	model, provider, status, error_code, error_message,
	ttft_ms, first_token_ms, e2e_ms, queue_ms, retrieval_ms, gen_ttft_ms, llm_prefill_ms,
	overhead_ms, retrieval_share, prefill_share,
	prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens,
	conn_reused, upstream_status, request_id, sweep_id, max_context_tokens,
	server_queue_ms, server_prefill_ms, server_load_ms, cache_creation_tokens, reasoning_ms
) VALUES (
	$1, $2, $3, $4, $5, $6, $7,
	$8, $9, $10, $11, $12,
	$13, $14, $15, $16, $17, $18, $19,
	$20, $21, $22,
	$23, $24, $25, $26,
	$27, $28, $29, $30, $31,
	$32, $33, $34, $35, $36
) ON CONFLICT (id) DO NOTHING RETURNING true`

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

// newRow checks what PostgreSQL could not be asked to check (the id is a
// UUID, integers fit in an int4 column, attrs encode as JSON) and returns the
// values to insert. Its errors wrap errInvalidRecord.
func newRow(rec pipeline.Record) (row, error) {
	id, err := uuid.Parse(rec.QueryID)
	if err != nil {
		return row{}, fmt.Errorf("%w: query id %.80q is not a UUID", errInvalidRecord, rec.QueryID)
	}
	pgID := pgtype.UUID{Bytes: id, Valid: true}
	ints := []struct {
		name string
		v    int
	}{
		{"top_k", rec.TopK}, {"rerank_top_n", rec.RerankTopN}, {"max_tokens", rec.MaxTokens},
		{"prompt_tokens", rec.Usage.PromptTokens}, {"completion_tokens", rec.Usage.CompletionTokens},
		{"cached_tokens", rec.Usage.CachedTokens}, {"reasoning_tokens", rec.Usage.ReasoningTokens},
		{"upstream_status", rec.UpstreamStatus}, {"max_context_tokens", rec.MaxContextTokens},
		{"cache_creation_tokens", rec.Usage.CacheCreationTokens},
	}
	for _, f := range ints {
		if f.v < math.MinInt32 || f.v > math.MaxInt32 {
			return row{}, fmt.Errorf("%w: %s %d is out of range", errInvalidRecord, f.name, f.v)
		}
	}
	var upstream, budget any
	if rec.UpstreamStatus != 0 {
		upstream = int32(rec.UpstreamStatus)
	}
	if rec.MaxContextTokens != 0 {
		budget = int32(rec.MaxContextTokens)
	}
	var sweepID pgtype.UUID
	if rec.SweepID != "" {
		sid, err := uuid.Parse(rec.SweepID)
		if err != nil {
			return row{}, fmt.Errorf("%w: sweep id %.80q is not a UUID", errInvalidRecord, rec.SweepID)
		}
		sweepID = pgtype.UUID{Bytes: sid, Valid: true}
	}
	r := row{
		queryID: rec.QueryID,
		query: []any{
			pgID, rec.CreatedAt, nullString(rec.Question), rec.QuestionSHA256,
			int32(rec.TopK), int32(rec.RerankTopN), int32(rec.MaxTokens),
			rec.Model, rec.Provider, rec.Status, nullString(rec.ErrorCode), nullString(rec.ErrorMessage),
			rec.TTFTMs, rec.FirstTokenMs, rec.E2EMs, rec.QueueMs, rec.RetrievalMs, rec.GenTTFTMs, rec.LLMPrefillMs,
			rec.OverheadMs, rec.RetrievalShare, rec.PrefillShare,
			int32(rec.Usage.PromptTokens), int32(rec.Usage.CompletionTokens),
			int32(rec.Usage.CachedTokens), int32(rec.Usage.ReasoningTokens),
			rec.ConnReused, upstream, nullString(rec.RequestID), sweepID, budget,
			rec.ServerQueueMs, rec.ServerPrefillMs, rec.ServerLoadMs, int32(rec.Usage.CacheCreationTokens),
			rec.ReasoningMs,
		},
		stages: make([][]any, 0, len(rec.Stages)),
	}
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

// nullString maps "" to NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
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
