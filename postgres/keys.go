package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/auth"
)

// ErrKeyNotFound is returned by Revoke for an id or prefix no key has.
var ErrKeyNotFound = errors.New("no API key has that id or prefix")

// Keys stores API keys in the api_keys table (migration 0012). It
// implements auth.Store.
type Keys struct {
	pool *pgxpool.Pool
}

// NewKeys returns the key store on pool.
func NewKeys(pool *pgxpool.Pool) *Keys { return &Keys{pool: pool} }

const keyColumns = `id::text, name, kind, prefix, hash, scopes, origins, rate_count, rate_period_ms, concurrency,
	models, filter_doc_ids, filter_metadata, created_at, expires_at, revoked_at, last_used_at, ttft_budget_ms`

// Create stores k (which must have passed Validate and carry the token's
// prefix and hash) under a new id, and returns it with its id and creation
// time set.
func (s *Keys) Create(ctx context.Context, k auth.Key) (auth.Key, error) {
	if err := k.Validate(); err != nil {
		return auth.Key{}, err
	}
	k.ID = uuid.NewString()
	meta, err := json.Marshal(orEmpty(k.Filter.Metadata))
	if err != nil {
		return auth.Key{}, fmt.Errorf("encoding the key's metadata filter: %w", err)
	}
	var rateCount, ratePeriod *int64
	if k.Rate.N > 0 {
		n, p := int64(k.Rate.N), k.Rate.Per.Milliseconds()
		rateCount, ratePeriod = &n, &p
	}
	var expires *time.Time
	if !k.ExpiresAt.IsZero() {
		expires = &k.ExpiresAt
	}
	var budget *int
	if k.TTFTBudgetMs > 0 {
		budget = &k.TTFTBudgetMs
	}
	err = s.pool.QueryRow(ctx, `INSERT INTO api_keys
		(id, name, kind, prefix, hash, scopes, origins, rate_count, rate_period_ms, concurrency, models,
		 filter_doc_ids, filter_metadata, expires_at, ttft_budget_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING created_at`,
		k.ID, k.Name, string(k.Kind), k.Prefix, k.Hash[:], scopeStrings(k.Scopes), nonNil(k.Origins),
		rateCount, ratePeriod, k.Concurrency, nonNil(k.Models), nonNil(k.Filter.DocIDs), meta, expires, budget,
	).Scan(&k.CreatedAt)
	if err != nil {
		return auth.Key{}, fmt.Errorf("storing the API key: %w", err)
	}
	return k, nil
}

// LoadKeys returns every key, revoked and expired ones included, oldest
// first.
func (s *Keys) LoadKeys(ctx context.Context) ([]auth.Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("reading API keys: %w", err)
	}
	defer rows.Close()
	var keys []auth.Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading API keys: %w", err)
	}
	return keys, nil
}

func scanKey(rows pgx.Rows) (auth.Key, error) {
	var (
		k                        auth.Key
		kind                     string
		hash                     []byte
		scopes                   []string
		rateCount, ratePeriod    *int64
		meta                     []byte
		expires, revoked, usedAt *time.Time
		budget                   *int32
	)
	if err := rows.Scan(&k.ID, &k.Name, &kind, &k.Prefix, &hash, &scopes, &k.Origins, &rateCount, &ratePeriod,
		&k.Concurrency, &k.Models, &k.Filter.DocIDs, &meta, &k.CreatedAt, &expires, &revoked, &usedAt, &budget); err != nil {
		return auth.Key{}, fmt.Errorf("reading an API key: %w", err)
	}
	k.Kind = auth.Kind(kind)
	if budget != nil {
		k.TTFTBudgetMs = int(*budget)
	}
	if len(hash) != len(k.Hash) {
		return auth.Key{}, fmt.Errorf("API key %s: stored hash has %d bytes, want %d", k.Prefix, len(hash), len(k.Hash))
	}
	copy(k.Hash[:], hash)
	for _, sc := range scopes {
		k.Scopes = append(k.Scopes, auth.Scope(sc))
	}
	if rateCount != nil && ratePeriod != nil {
		k.Rate = auth.Rate{N: int(*rateCount), Per: time.Duration(*ratePeriod) * time.Millisecond}
	}
	if err := json.Unmarshal(meta, &k.Filter.Metadata); err != nil {
		return auth.Key{}, fmt.Errorf("API key %s: decoding its metadata filter: %w", k.Prefix, err)
	}
	if len(k.Filter.Metadata) == 0 {
		k.Filter.Metadata = nil
	}
	if len(k.Filter.DocIDs) == 0 {
		k.Filter.DocIDs = nil
	}
	for _, t := range []struct {
		src *time.Time
		dst *time.Time
	}{{expires, &k.ExpiresAt}, {revoked, &k.RevokedAt}, {usedAt, &k.LastUsedAt}} {
		if t.src != nil {
			*t.dst = *t.src
		}
	}
	return k, nil
}

// Revoke marks the key with id or prefix idOrPrefix revoked (now), and
// returns it; a key revoked before keeps its first revocation time.
func (s *Keys) Revoke(ctx context.Context, idOrPrefix string) (auth.Key, error) {
	var where string
	var arg any
	if id, err := uuid.Parse(idOrPrefix); err == nil {
		where, arg = "id = $1", id.String()
	} else if auth.LooksLikePrefix(idOrPrefix) {
		where, arg = "prefix = $1", idOrPrefix
	} else {
		return auth.Key{}, fmt.Errorf("%w: %q is neither a key id (UUID) nor a prefix (rt_sk_… as `ragtime keys list` shows)", ErrKeyNotFound, idOrPrefix)
	}
	rows, err := s.pool.Query(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE `+where+
		` RETURNING `+keyColumns, arg)
	if err != nil {
		return auth.Key{}, fmt.Errorf("revoking API key %s: %w", idOrPrefix, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return auth.Key{}, fmt.Errorf("revoking API key %s: %w", idOrPrefix, err)
		}
		return auth.Key{}, fmt.Errorf("%w: %s", ErrKeyNotFound, idOrPrefix)
	}
	return scanKey(rows)
}

// MarkUsed sets each key's last_used_at to the given time unless a later
// one is stored.
func (s *Keys) MarkUsed(ctx context.Context, used map[string]time.Time) error {
	ids := make([]string, 0, len(used))
	ats := make([]time.Time, 0, len(used))
	for id, at := range used {
		ids, ats = append(ids, id), append(ats, at)
	}
	_, err := s.pool.Exec(ctx, `UPDATE api_keys k SET last_used_at = u.at
		FROM unnest($1::uuid[], $2::timestamptz[]) AS u(id, at)
		WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)`, ids, ats)
	if err != nil {
		return fmt.Errorf("recording API keys' last use: %w", err)
	}
	return nil
}

func scopeStrings(s []auth.Scope) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = string(x)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
