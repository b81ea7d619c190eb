package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"ragtime"
	"ragtime/auth"
	"ragtime/pipeline"
)

// newKey makes a secret key with id and scopes; it returns its token and
// the key a keyring holds.
func newKey(t *testing.T, id string, scopes ...auth.Scope) (string, auth.Key) {
	t.Helper()
	token, prefix, hash, err := auth.NewToken(auth.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return token, auth.Key{ID: id, Name: id, Kind: auth.Secret, Prefix: prefix, Hash: hash, Scopes: scopes}
}

// getWith is get with the key token ("": none) as Authorization: Bearer.
func getWith(t *testing.T, url, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestClientSendsItsKey: the sweep's client reaches a server that requires
// keys with its APIKey, and is refused (auth_missing) without one.
func TestClientSendsItsKey(t *testing.T) {
	t.Parallel()
	token, key := newKey(t, "k1", auth.ScopeAsk)
	keys := auth.NewKeyring()
	keys.Set([]auth.Key{key})
	var gotKey string
	asker := askerFunc(func(_ context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		gotKey = req.KeyID
		rec := ragtime.Record{QueryID: "q1", Status: ragtime.StatusOK}
		_ = out.Meta(pipeline.Meta{QueryID: rec.QueryID})
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker, Keys: keys})
	req := pipeline.Request{Question: "q", TopK: 3, RerankTopN: 1, MaxTokens: 8}

	if got := (&Client{BaseURL: ts.URL}).Run(context.Background(), &req, pipeline.Discard{}); got.Status != ragtime.StatusError || !strings.Contains(got.ErrorMessage, "auth_missing") {
		t.Errorf("without a key: %s %s, want an error naming auth_missing", got.Status, got.ErrorMessage)
	}
	if got := (&Client{BaseURL: ts.URL, APIKey: token}).Run(context.Background(), &req, pipeline.Discard{}); got.Status != ragtime.StatusOK || gotKey != "k1" {
		t.Errorf("with the key: %s %s %s, key id %q", got.Status, got.ErrorCode, got.ErrorMessage, gotKey)
	}
}

// TestFailedKeysAreThrottledPerAddress: wrong secrets for a real prefix are
// 401 up to the bound, then 429 auth_throttled with Retry-After, a valid key
// from that address included (else the 429 would tell which guess was
// right); a request without a key still hears that it needs one.
func TestFailedKeysAreThrottledPerAddress(t *testing.T) {
	t.Parallel()
	token, key := newKey(t, "k1", auth.ScopeRead)
	keys := auth.NewKeyring()
	keys.Set([]auth.Key{key})
	ts := newTestServer(t, Deps{Keys: keys, AuthFailures: auth.Rate{N: 5, Per: time.Minute}})
	wrong := token[:len(token)-1] + "A"
	if wrong == token {
		wrong = token[:len(token)-1] + "B"
	}
	do := func(tok string) (int, string, http.Header) { return getWith(t, ts.URL+"/v1/queries", tok) }
	for i := range 5 {
		if status, body, _ := do(wrong); status != 401 {
			t.Fatalf("wrong secret %d: %d %s, want 401", i, status, body)
		}
	}
	for _, tok := range []string{wrong, token} {
		status, body, h := do(tok)
		if status != 429 || !strings.Contains(body, "auth_throttled") || h.Get("Retry-After") == "" {
			t.Errorf("after 5 failures (valid key %v): %d %s Retry-After %q, want 429 auth_throttled with Retry-After", tok == token, status, body, h.Get("Retry-After"))
		}
	}
	if status, body, _ := do(""); status != 401 || !strings.Contains(body, "auth_missing") {
		t.Errorf("without a key: %d %s, want 401 auth_missing", status, body)
	}
}

// TestStoredFailureReadsByScope: a key reading its own failed query gets
// the caller's text of the failure; an admin key reads the operator's,
// with the model server's address.
func TestStoredFailureReadsByScope(t *testing.T) {
	t.Parallel()
	reader, readKey := newKey(t, "k0", auth.ScopeRead)
	admin, adminKey := newKey(t, "k1", auth.ScopeAdmin)
	keys := auth.NewKeyring()
	keys.Set([]auth.Key{readKey, adminKey})
	operator := "could not connect to the model provider at http://10.0.0.7:8000/v1"
	ts := newTestServer(t, Deps{Keys: keys, Queries: mapReader{"q1": {QueryID: "q1", KeyID: "k0", Status: ragtime.StatusError,
		ErrorCode: "llm_connect", ErrorMessage: operator}}})
	read := func(token string) string {
		_, body, _ := getWith(t, ts.URL+"/v1/queries/q1", token)
		return body
	}
	if body := read(reader); strings.Contains(body, "10.0.0.7") || !strings.Contains(body, "could not reach its model provider") {
		t.Errorf("the read key's own failed query: %s", body)
	}
	if body := read(admin); !strings.Contains(body, operator) {
		t.Errorf("the admin key's read: %s", body)
	}
}

// TestNoKeysNeverOpenWhereOpenIsRefused: a server that may not run open
// (serve beyond loopback without --insecure-no-auth) whose keys turn out to
// be none answers 503 auth_no_keys instead of running open.
func TestNoKeysNeverOpenWhereOpenIsRefused(t *testing.T) {
	t.Parallel()
	keys := auth.NewKeyring()
	keys.Set(nil) // loaded: no keys
	ts := newTestServer(t, Deps{Keys: keys, Queries: mapReader{}, RefuseOpen: true})
	if status, body, _ := getWith(t, ts.URL+"/v1/queries/q1", ""); status != 503 || !strings.Contains(body, "auth_no_keys") {
		t.Errorf("no keys, open refused: %d %s, want 503 auth_no_keys", status, body)
	}
	open := newTestServer(t, Deps{Keys: keys, Queries: mapReader{}})
	if status, body, _ := getWith(t, open.URL+"/v1/queries/q1", ""); status != 404 {
		t.Errorf("no keys on loopback: %d %s, want the open server's 404", status, body)
	}
}
