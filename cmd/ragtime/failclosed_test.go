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

// TestServeThrottlesFailedKeys: with serve's default --auth-failure-rate,
// wrong secrets for a real prefix stop getting 401 after 20 and get 429
// auth_throttled with Retry-After; --auth-failure-rate 0 turns it off.
func TestServeThrottlesFailedKeys(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	k := createKey(t, env, "--name", "reader", "--scopes", "read")
	wrong := k.prefix + "_" + strings.Repeat("A", 43)
	for _, tc := range []struct {
		flags        []string
		want401, n   int
		wantThrottle bool
	}{{nil, 20, 25, true}, {[]string{"--auth-failure-rate", "0"}, 25, 25, false}} {
		srv := startServe(t, env, append([]string{"--data-dir", t.TempDir()}, tc.flags...)...)
		got := map[int]int{}
		var retry string
		for range tc.n {
			status, h, _ := call(t, "GET", srv.url+"/v1/queries", wrong, nil, nil)
			got[status]++
			if status == 429 {
				retry = h.Get("Retry-After")
			}
		}
		if got[401] != tc.want401 || (got[429] > 0) != tc.wantThrottle || (tc.wantThrottle && retry == "") {
			t.Errorf("%v: %d wrong secrets gave %v (Retry-After %q), want %d × 401 then 429s: %v", tc.flags, tc.n, got, retry, tc.want401, tc.wantThrottle)
		}
	}
}
