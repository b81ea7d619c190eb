package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"ragtime/postgres/postgrestest"
)

// TestAuthFailsClosedWhenKeysCannotBeRead: a keyed database, Postgres away
// when serve starts and no key snapshot in the data dir. Nothing says
// whether keys exist, so serve, on loopback too, answers every API request
// 503 auth_unavailable with a hint (it used to run open: no key could ask,
// list, add and delete documents) until Postgres answers; then the keys
// apply.
func TestAuthFailsClosedWhenKeysCannotBeRead(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	k := createKey(t, map[string]string{"DATABASE_URL": dbURL}, "--name", "docs", "--scopes", "documents")
	proxy := postgrestest.NewProxy(t, postgrestest.HostPort(t, dbURL))
	proxy.Cut()
	srv := startServe(t, map[string]string{"DATABASE_URL": proxy.URL(dbURL)}, "--data-dir", t.TempDir(), "--keys-reload", "200ms")
	if !strings.Contains(srv.stderr.String(), "API keys unknown") {
		t.Errorf("no start-up line saying the keys are unknown:\n%s", srv.stderr.String())
	}
	for _, token := range []string{"", k.token} {
		for _, r := range []struct{ method, path string }{
			{"GET", "/v1/documents"}, {"POST", "/v1/documents"}, {"DELETE", "/v1/documents/x.md"}, {"GET", "/v1/queries"}, {"GET", "/ask?q=prefill"},
		} {
			var body *bytes.Reader
			h := map[string]string{}
			if r.method == "POST" {
				b, ct := multipartBody(t, map[string]string{"x.md": "# X\n\nadded while the keys were unknown"})
				body, h["Content-Type"] = bytes.NewReader(b), ct
			} else {
				body = bytes.NewReader(nil)
			}
			status, _, raw := call(t, r.method, srv.url+r.path, token, body, h)
			var e hintedErr
			if status != 503 || json.Unmarshal(raw, &e) != nil || e.Error.Code != "auth_unavailable" || !strings.Contains(e.Error.Hint, "retry") {
				t.Errorf("%s %s (key %v) while the keys are unknown: %d %s, want 503 auth_unavailable with a hint", r.method, r.path, token != "", status, raw)
			}
		}
	}

	proxy.Restore()
	eventually(t, "the keys to load once Postgres answers", func() bool {
		status, _, _ := call(t, "GET", srv.url+"/v1/documents", k.token, nil, nil)
		return status == 200
	})
	if status, _, raw := call(t, "GET", srv.url+"/v1/documents", "", nil, nil); status != 401 {
		t.Errorf("without a key once the keys loaded: %d %s, want 401", status, raw)
	}
}
