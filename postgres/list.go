package postgres

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"ragtime"
)

// ListQueries returns the queries f selects, newest first (ties broken by
// id), one page at a time. The page after a cursor is stable while new
// queries arrive: it continues strictly below the cursor's position.
func (s *Store) ListQueries(ctx context.Context, f ragtime.QueryFilter) (ragtime.QueryPage, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = ragtime.DefaultListLimit
	}
	limit = min(limit, ragtime.MaxListLimit)

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
	if f.Provider != "" {
		add("q.provider = ?", f.Provider)
	}
	if f.Model != "" {
		add("q.model = ?", f.Model)
	}
	if f.TopK != 0 {
		add("q.top_k = ?", int32(f.TopK))
	}
	if f.Retrieval != "" {
		add("q.retrieval = ?", f.Retrieval)
	}
	if f.KeyID != "" {
		id, err := uuid.Parse(f.KeyID)
		if err != nil {
			return ragtime.QueryPage{Queries: []ragtime.QuerySummary{}}, nil // no query has that key
		}
		add("q.key_id = ?", id)
	}
	if f.Cursor != "" {
		at, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return ragtime.QueryPage{}, err
		}
		add("(q.created_at, q.id) < (?, ?)", at, id)
	}
	sql := `SELECT q.id::text AS id, q.created_at, coalesce(q.question, '') AS question, q.model, q.provider,
	q.status, coalesce(q.error_code, '') AS error_code, q.top_k, q.rerank_top_n,
	coalesce(q.retrieval, '') AS retrieval, q.ttft_ms, q.first_token_ms, q.e2e_ms, q.queue_ms, q.retrieval_ms, q.gen_ttft_ms, q.llm_prefill_ms,
	q.overhead_ms, q.retrieval_share, q.prefill_share, q.prompt_tokens, q.completion_tokens, q.cached_tokens,
	(SELECT jsonb_object_agg(s.name, s.duration_ms) FROM query_stages s WHERE s.query_id = q.id AND s.created_at = q.created_at) AS stages
FROM queries q`
	if len(where) > 0 {
		sql += "\nWHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	sql += "\nORDER BY q.created_at DESC, q.id DESC LIMIT $" + strconv.Itoa(len(args))

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return ragtime.QueryPage{}, fmt.Errorf("list queries: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[ragtime.QuerySummary])
	if err != nil {
		return ragtime.QueryPage{}, fmt.Errorf("list queries: %w", err)
	}
	page := ragtime.QueryPage{Queries: list}
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
		page.Queries = []ragtime.QuerySummary{}
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
		return time.Time{}, uuid.UUID{}, ragtime.ErrInvalidCursor
	}
	micros, id, ok := strings.Cut(string(raw), ",")
	if !ok {
		return time.Time{}, uuid.UUID{}, ragtime.ErrInvalidCursor
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return time.Time{}, uuid.UUID{}, ragtime.ErrInvalidCursor
	}
	parsed, err := uuid.Parse(id)
	if err != nil {
		return time.Time{}, uuid.UUID{}, ragtime.ErrInvalidCursor
	}
	return time.UnixMicro(us), parsed, nil
}
