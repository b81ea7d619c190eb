package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"

	"ragtime/postgres/postgrestest"
)

// callHost is call, without a token, with the request's Host set to host
// ("" keeps the URL's).
func callHost(t *testing.T, method, rawURL, host string, body io.Reader, headers map[string]string) (int, []byte) {
	t.Helper()
	h := map[string]string{}
	for k, v := range headers {
		h[k] = v
	}
	if host != "" {
		h["Host"] = host
	}
	status, _, b := call(t, method, rawURL, "", body, h)
	return status, b
}

// TestDNSRebindingRefusedWithoutKeys: a page on evil.example whose name was
// pointed at 127.0.0.1 is same-origin with serve to the browser (Host and
// Origin agree); while serve runs open it may not add, list, read or delete
// anything. Loopback names, IP addresses and --allowed-hosts still pass.
func TestDNSRebindingRefusedWithoutKeys(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", t.TempDir())
	u, _ := url.Parse(srv.url)
	evil := "evil.example:" + u.Port()
	page := map[string]string{"Origin": "http://" + evil}

	add := func(base, host string, headers map[string]string) (int, []byte) {
		body, ct := multipartBody(t, map[string]string{"x.md": "# X\n\nplanted by a rebound page"})
		h := map[string]string{"Content-Type": ct}
		for k, v := range headers {
			h[k] = v
		}
		return callHost(t, "POST", base+"/v1/documents", host, bytes.NewReader(body), h)
	}
	if status, body := add(srv.url, evil, page); status != 403 || !bytes.Contains(body, []byte("host_denied")) || !bytes.Contains(body, []byte("--allowed-hosts")) {
		t.Errorf("rebound POST /v1/documents: %d %s, want 403 host_denied naming --allowed-hosts", status, body)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/documents"}, {"GET", "/v1/queries"}, {"DELETE", "/v1/documents/x.md"}, {"GET", "/ask?q=prefill"}, {"GET", "/metrics"},
	} {
		if status, body := callHost(t, r.method, srv.url+r.path, evil, nil, page); status != 403 || !bytes.Contains(body, []byte("host_denied")) {
			t.Errorf("rebound %s %s: %d %s, want 403 host_denied", r.method, r.path, status, body)
		}
	}
	var docs struct{ Count int }
	if status, listed := callHost(t, "GET", srv.url+"/v1/documents", "", nil, nil); status != 200 || json.Unmarshal(listed, &docs) != nil || docs.Count != 0 {
		t.Errorf("after the refused writes: %d %s, want an empty index", status, listed)
	}

	// What a person or a tool on this machine uses still works.
	for _, host := range []string{"", "localhost:" + u.Port(), "LOCALHOST.:" + u.Port(), "app.localhost:" + u.Port(), "[::1]:" + u.Port(), "127.0.0.2:" + u.Port()} {
		if status, body := callHost(t, "GET", srv.url+"/v1/documents", host, nil, nil); status != 200 {
			t.Errorf("Host %q: %d %s, want 200", host, status, body)
		}
	}
	listing := startServe(t, env, "--data-dir", t.TempDir(), "--allowed-hosts", "rag.internal,Evil.Example.")
	lu, _ := url.Parse(listing.url)
	for _, host := range []string{"rag.internal:" + lu.Port(), "evil.example"} {
		if status, body := callHost(t, "GET", listing.url+"/v1/documents", host, nil, nil); status != 200 {
			t.Errorf("Host %q listed in --allowed-hosts: %d %s, want 200", host, status, body)
		}
	}
	if status, body := callHost(t, "GET", listing.url+"/v1/documents", "other.example", nil, nil); status != 403 {
		t.Errorf("Host not in --allowed-hosts: %d %s, want 403", status, body)
	}

	var o, e syncBuffer
	err := run(context.Background(), []string{"serve", "--allowed-hosts", "http://rag.internal/", "--data-dir", t.TempDir()}, envMap(env), &o, &e)
	if err == nil || !strings.Contains(err.Error(), "--allowed-hosts") {
		t.Errorf("--allowed-hosts with a URL: %v, want an error naming the flag", err)
	}
}

// TestCrossSiteAskRefusedWithoutKeys: while serve runs open, a page on
// another site cannot start an ask with GET /ask (an EventSource, or an
// <img> without Origin) unless its origin is in --cors-origins: CORS hides
// the answer, not the call, and the call is billed.
func TestCrossSiteAskRefusedWithoutKeys(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", ingestCorpus(t, env))
	for _, h := range []map[string]string{
		{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Origin": "https://evil.example"},
	} {
		status, body := callHost(t, "GET", srv.url+"/ask?q=prefill", "", nil, h)
		if status != 403 || !bytes.Contains(body, []byte("cross_site_denied")) {
			t.Errorf("cross-site GET /ask %v: %d %s, want 403 cross_site_denied", h, status, body)
		}
	}
	// The same-origin page and tools without Sec-Fetch-Site still ask; only
	// their queries are stored.
	for _, h := range []map[string]string{nil, {"Origin": srv.url, "Sec-Fetch-Site": "same-origin"}} {
		if status, body := callHost(t, "GET", srv.url+"/ask?q=prefill", "", nil, h); status != 200 || !bytes.Contains(body, []byte("event: done")) {
			t.Errorf("GET /ask %v: %d %.300s, want an answered ask", h, status, body)
		}
	}
	eventually(t, "the two allowed asks stored", func() bool { return countRows(t, pool, "queries") >= 2 })
	if n := countRows(t, pool, "queries"); n != 2 {
		t.Errorf("%d queries stored, want only the 2 allowed ones", n)
	}

	trusting := startServe(t, env, "--data-dir", t.TempDir(), "--cors-origins", "https://app.example")
	if status, body := callHost(t, "GET", trusting.url+"/ask?q=prefill", "", nil,
		map[string]string{"Origin": "https://app.example", "Sec-Fetch-Site": "cross-site"}); status != 200 {
		t.Errorf("GET /ask from an origin in --cors-origins: %d %.300s", status, body)
	}
}

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
	if l := srv.stderr.String(); !strings.Contains(l, "API keys loaded") {
		t.Errorf("the log does not say the keys were unreadable, then loaded:\n%s", l)
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
