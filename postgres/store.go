package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/pipeline"
)

// ErrNotFound is returned for a query id that is not stored, including one
// that is not a UUID at all.
var ErrNotFound = errors.New("query not found")

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

const selectQuery = `SELECT
	id::text, created_at, coalesce(question, ''), question_sha256, top_k, rerank_top_n, max_tokens,
	model, provider, status, coalesce(error_code, ''), coalesce(error_message, ''),
	ttft_ms, first_token_ms, e2e_ms, queue_ms, retrieval_ms, gen_ttft_ms, llm_prefill_ms,
	overhead_ms, retrieval_share, prefill_share,
	prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens,
	conn_reused, coalesce(upstream_status, 0), coalesce(request_id, ''),
	coalesce(sweep_id::text, ''), coalesce(max_context_tokens, 0),
	server_queue_ms, server_prefill_ms, server_load_ms, cache_creation_tokens, reasoning_ms
FROM queries WHERE id = $1`

const selectStages = `SELECT seq, name, start_ms, duration_ms, attrs
FROM query_stages WHERE query_id = $1 ORDER BY seq`

// GetQuery returns the stored query id with its stages ordered by seq, or
// ErrNotFound.
//
// What comes back equals what was recorded, except: QueryID is in canonical
// lower-case form; CreatedAt is in UTC, rounded to the microsecond and
// without a monotonic clock reading; a query without stages has nil Stages;
// and Attrs values are JSON-decoded (numbers are float64, objects
// map[string]any, arrays []any), while nil Attrs stay nil.
func (s *Store) GetQuery(ctx context.Context, id string) (pipeline.Record, error) {
	parsed, err := uuid.Parse(id)
	if err != nil {
		return pipeline.Record{}, ErrNotFound
	}
	pgID := pgtype.UUID{Bytes: parsed, Valid: true}

	var rec pipeline.Record
	err = s.pool.QueryRow(ctx, selectQuery, pgID).Scan(
		&rec.QueryID, &rec.CreatedAt, &rec.Question, &rec.QuestionSHA256, &rec.TopK, &rec.RerankTopN, &rec.MaxTokens,
		&rec.Model, &rec.Provider, &rec.Status, &rec.ErrorCode, &rec.ErrorMessage,
		&rec.TTFTMs, &rec.FirstTokenMs, &rec.E2EMs, &rec.QueueMs, &rec.RetrievalMs, &rec.GenTTFTMs, &rec.LLMPrefillMs,
		&rec.OverheadMs, &rec.RetrievalShare, &rec.PrefillShare,
		&rec.Usage.PromptTokens, &rec.Usage.CompletionTokens, &rec.Usage.CachedTokens, &rec.Usage.ReasoningTokens,
		&rec.ConnReused, &rec.UpstreamStatus, &rec.RequestID,
		&rec.SweepID, &rec.MaxContextTokens,
		&rec.ServerQueueMs, &rec.ServerPrefillMs, &rec.ServerLoadMs, &rec.Usage.CacheCreationTokens,
		&rec.ReasoningMs,
	)
	if errors.Is(err, pgx.ErrNoRows) {
		return pipeline.Record{}, ErrNotFound
	}
	if err != nil {
		return pipeline.Record{}, fmt.Errorf("read query %s: %w", parsed, err)
	}
	rec.CreatedAt = rec.CreatedAt.UTC()

	rows, err := s.pool.Query(ctx, selectStages, pgID)
	if err != nil {
		return pipeline.Record{}, fmt.Errorf("read stages of query %s: %w", parsed, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sp pipeline.Span
		var attrs []byte
		if err := rows.Scan(&sp.Seq, &sp.Name, &sp.StartMs, &sp.DurationMs, &attrs); err != nil {
			return pipeline.Record{}, fmt.Errorf("read stages of query %s: %w", parsed, err)
		}
		if attrs != nil {
			if err := json.Unmarshal(attrs, &sp.Attrs); err != nil {
				return pipeline.Record{}, fmt.Errorf("decode attrs of stage %q of query %s: %w", sp.Name, parsed, err)
			}
		}
		rec.Stages = append(rec.Stages, sp)
	}
	if err := rows.Err(); err != nil {
		return pipeline.Record{}, fmt.Errorf("read stages of query %s: %w", parsed, err)
	}
	return rec, nil
}
