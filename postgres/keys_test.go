package postgres_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"ragtime/auth"
	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

func TestKeysRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	pool := postgrestest.NewPool(t)
	keys := postgres.NewKeys(pool)

	token, prefix, hash, err := auth.NewToken(auth.Secret)
	if err != nil {
		t.Fatal(err)
	}
	in := auth.Key{
		Name: "tenant a", Kind: auth.Secret, Prefix: prefix, Hash: hash,
		Scopes: []auth.Scope{auth.ScopeAsk, auth.ScopeRead}, Origins: []string{"https://a.example"},
		Rate: auth.Rate{N: 60, Per: time.Minute}, Concurrency: 4, Models: []string{"m1"},
		Filter:    pipeline.Filter{DocIDs: []string{"a.md"}, Metadata: map[string]string{"tenant": "a"}},
		ExpiresAt: time.Now().Add(90 * 24 * time.Hour).Truncate(time.Microsecond), TTFTBudgetMs: 800,
	}
	created, err := keys.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := keys.LoadKeys(ctx)
	if err != nil || len(loaded) != 1 {
		t.Fatalf("LoadKeys = %d keys, %v", len(loaded), err)
	}
	got := loaded[0]
	if got.ID != created.ID || got.Name != in.Name || got.Prefix != prefix || got.Hash != hash ||
		got.Rate != in.Rate || got.Concurrency != 4 || got.Models[0] != "m1" || got.Filter.Metadata["tenant"] != "a" ||
		got.Filter.DocIDs[0] != "a.md" || !got.ExpiresAt.Equal(in.ExpiresAt) || len(got.Scopes) != 2 || got.Origins[0] != "https://a.example" ||
		got.TTFTBudgetMs != 800 {
		t.Errorf("loaded %+v\nwant %+v", got, in)
	}

	// The token itself is stored nowhere.
	var dump []byte
	if err := pool.QueryRow(ctx, `SELECT convert_to(string_agg(t::text, ''), 'UTF8') FROM api_keys t`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(dump, []byte(token[len(prefix)+1:])) {
		t.Error("the api_keys row holds the token's secret part")
	}

	at := time.Now().Truncate(time.Microsecond)
	if err := keys.MarkUsed(ctx, map[string]time.Time{created.ID: at}); err != nil {
		t.Fatal(err)
	}
	if err := keys.MarkUsed(ctx, map[string]time.Time{created.ID: at.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	revoked, err := keys.Revoke(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if revoked.RevokedAt.IsZero() || !revoked.LastUsedAt.Equal(at) {
		t.Errorf("after revoke: revoked %v, last used %v (want %v)", revoked.RevokedAt, revoked.LastUsedAt, at)
	}
	if _, err := keys.Revoke(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, postgres.ErrKeyNotFound) {
		t.Errorf("revoking an unknown id: %v", err)
	}
	if _, err := keys.Revoke(ctx, "nonsense"); !errors.Is(err, postgres.ErrKeyNotFound) {
		t.Errorf("revoking nonsense: %v", err)
	}
	// The table's own checks back Validate up.
	bad := in
	bad.Kind, bad.Prefix = auth.Publishable, prefix+"x"
	if _, err := keys.Create(ctx, bad); err == nil {
		t.Error("a publishable key with scopes ask,read was stored")
	}
}
