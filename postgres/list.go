package postgres

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrInvalidCursor is returned by ListQueries for a cursor it did not make.
var ErrInvalidCursor = errors.New("cursor is not one this server returned")

// Query list bounds.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// QueryFilter selects the queries ListQueries returns, newest first. Zero
// fields do not filter.
type QueryFilter struct {
	// Since keeps queries created at or after it; Until those created
	// before it.
	Since, Until time.Time
	// Status is ok, error or cancelled.
	Status string
	// Model is the model name, exactly.
	Model string
	// TopK is the top_k the query asked for.
	TopK int
	// Limit is the page size: DefaultListLimit when 0, at most MaxListLimit.
	Limit int
	// Cursor is a previous page's NextCursor: the page after it.
	Cursor string
}

// QuerySummary is one query of a list: its timings without attributes, and
// the duration of each of its stages.
type QuerySummary struct {
	ID               string             `json:"query_id" db:"id"`
	CreatedAt        time.Time          `json:"created_at" db:"created_at"`
	Question         string             `json:"question,omitempty" db:"question"`
	Model            string             `json:"model" db:"model"`
	Provider         string             `json:"provider" db:"provider"`
	Status           string             `json:"status" db:"status"`
	ErrorCode        string             `json:"error_code,omitempty" db:"error_code"`
	TopK             int                `json:"top_k" db:"top_k"`
	RerankTopN       int                `json:"rerank_top_n" db:"rerank_top_n"`
	TTFTMs           *float64           `json:"ttft_ms" db:"ttft_ms"`
	FirstTokenMs     *float64           `json:"first_token_ms" db:"first_token_ms"`
	E2EMs            float64            `json:"e2e_ms" db:"e2e_ms"`
	QueueMs          float64            `json:"queue_ms" db:"queue_ms"`
	RetrievalMs      float64            `json:"retrieval_ms" db:"retrieval_ms"`
	GenTTFTMs        float64            `json:"gen_ttft_ms" db:"gen_ttft_ms"`
	LLMPrefillMs     float64            `json:"llm_prefill_ms" db:"llm_prefill_ms"`
	OverheadMs       *float64           `json:"overhead_ms" db:"overhead_ms"`
	RetrievalShare   *float64           `json:"retrieval_share" db:"retrieval_share"`
	PrefillShare     *float64           `json:"prefill_share" db:"prefill_share"`
	PromptTokens     int                `json:"prompt_tokens" db:"prompt_tokens"`
	CompletionTokens int                `json:"completion_tokens" db:"completion_tokens"`
	CachedTokens     int                `json:"cached_tokens" db:"cached_tokens"`
	Stages           map[string]float64 `json:"stages" db:"stages"`
}

// QueryPage is one page of ListQueries.
type QueryPage struct {
	Queries []QuerySummary `json:"queries"`
	// NextCursor fetches the next (older) page; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ListQueries returns the queries f selects, newest first (ties broken by
// id), one page at a time. The page after a cursor is stable while new
// queries arrive: it continues strictly below the cursor's position.
func (s *Store) ListQueries(ctx context.Context, f QueryFilter) (QueryPage, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)

	// The WHERE clause holds only the filters given, so that each shape gets
	// a plan using the index that fits it (a generic "$1 IS NULL OR ..."
	// plan would scan).
	var where []string
	var args []any
	add := func(cond string, v ...any) {
		for _, a := range v {
			args = append(args, a)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	if !f.Since.IsZero() {
		add("q.created_at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		add("q.created_at < ?", f.Until)
	}
	if f.Status != "" {
		add("q.status = ?", f.Status)
	}
	if f.Model != "" {
		add("q.model = ?", f.Model)
	}
	if f.TopK != 0 {
		add("q.top_k = ?", int32(f.TopK))
	}
	if f.Cursor != "" {
		at, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return QueryPage{}, err
		}
		add("(q.created_at, q.id) < (?, ?)", at, id)
	}
	sql := `SELECT q.id::text AS id, q.created_at, coalesce(q.question, '') AS question, q.model, q.provider,
	q.status, coalesce(q.error_code, '') AS error_code, q.top_k, q.rerank_top_n,
	q.ttft_ms, q.first_token_ms, q.e2e_ms, q.queue_ms, q.retrieval_ms, q.gen_ttft_ms, q.llm_prefill_ms,
	q.overhead_ms, q.retrieval_share, q.prefill_share, q.prompt_tokens, q.completion_tokens, q.cached_tokens,
	(SELECT jsonb_object_agg(s.name, s.duration_ms) FROM query_stages s WHERE s.query_id = q.id) AS stages
FROM queries q`
	if len(where) > 0 {
		sql += "\nWHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	sql += "\nORDER BY q.created_at DESC, q.id DESC LIMIT $" + strconv.Itoa(len(args))

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return QueryPage{}, fmt.Errorf("list queries: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[QuerySummary])
	if err != nil {
		return QueryPage{}, fmt.Errorf("list queries: %w", err)
	}
	page := QueryPage{Queries: list}
	if len(list) > limit {
		page.Queries = list[:limit]
		last := page.Queries[limit-1]
		page.NextCursor = encodeCursor(last.CreatedAt, last.ID)
	}
	for i := range page.Queries {
		page.Queries[i].CreatedAt = page.Queries[i].CreatedAt.UTC()
		if page.Queries[i].Stages == nil {
			page.Queries[i].Stages = map[string]float64{}
		}
	}
	if page.Queries == nil {
		page.Queries = []QuerySummary{}
	}
	return page, nil
}

// encodeCursor makes the opaque cursor for the position (at, id): the
// creation time in Unix microseconds (PostgreSQL's resolution) and the id.
func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "," + id))
}

func decodeCursor(c string) (time.Time, uuid.UUID, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, uuid.UUID{}, ErrInvalidCursor
	}
	micros, id, ok := strings.Cut(string(raw), ",")
	if !ok {
		return time.Time{}, uuid.UUID{}, ErrInvalidCursor
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return time.Time{}, uuid.UUID{}, ErrInvalidCursor
	}
	parsed, err := uuid.Parse(id)
	if err != nil {
		return time.Time{}, uuid.UUID{}, ErrInvalidCursor
	}
	return time.UnixMicro(us), parsed, nil
}

// Prune deletes the queries created before cutoff, with their stages, in
// batches of batch rows (10000 when batch ≤ 0) so that no transaction holds
// locks for long or grows large; it returns how many queries it deleted.
// It stops at ctx's end, keeping what it already deleted.
func (s *Store) Prune(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	if batch <= 0 {
		batch = 10000
	}
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM queries WHERE id IN (
			SELECT id FROM queries WHERE created_at < $1 ORDER BY created_at LIMIT $2)`, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("delete queries older than %s: %w", cutoff.UTC().Format(time.RFC3339), err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
