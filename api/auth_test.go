package api

import (
	"context"
	"strings"
	"testing"

	"ragtime/auth"
	"ragtime/pipeline"
)

// TestClientSendsItsKey: the sweep's client reaches a server that requires
// keys with its APIKey, and is refused (auth_missing) without one.
func TestClientSendsItsKey(t *testing.T) {
	t.Parallel()
	token, prefix, hash, err := auth.NewToken(auth.Secret)
	if err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeyring()
	keys.Set([]auth.Key{{ID: "k1", Name: "sweep", Kind: auth.Secret, Prefix: prefix, Hash: hash, Scopes: []auth.Scope{auth.ScopeAsk}}})
	var gotKey string
	asker := askerFunc(func(_ context.Context, req *pipeline.Request, out pipeline.Stream) *pipeline.Record {
		gotKey = req.KeyID
		rec := pipeline.Record{QueryID: "q1", Status: pipeline.StatusOK}
		_ = out.Meta(pipeline.Meta{QueryID: rec.QueryID})
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker, Keys: keys})
	req := pipeline.Request{Question: "q", TopK: 3, RerankTopN: 1, MaxTokens: 8}

	if got := (&Client{BaseURL: ts.URL}).Run(context.Background(), &req, pipeline.Discard{}); got.Status != pipeline.StatusError || !strings.Contains(got.ErrorMessage, "auth_missing") {
		t.Errorf("without a key: %s %s, want an error naming auth_missing", got.Status, got.ErrorMessage)
	}
	if got := (&Client{BaseURL: ts.URL, APIKey: token}).Run(context.Background(), &req, pipeline.Discard{}); got.Status != pipeline.StatusOK || gotKey != "k1" {
		t.Errorf("with the key: %s %s %s, key id %q", got.Status, got.ErrorCode, got.ErrorMessage, gotKey)
	}
}
