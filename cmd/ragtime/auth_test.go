package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/auth"
	"ragtime/postgres"
	"ragtime/retrieval/qdrant/qdranttest"
)

var (
	tokenRE   = regexp.MustCompile(`(?m)^  (rt_[sp]k_[a-z2-7]{12}_[A-Za-z0-9_-]{43})$`)
	createdRE = regexp.MustCompile(`id ([0-9a-f-]{36}), prefix (rt_[sp]k_[a-z2-7]{12})`)
)

// createdKey is a key made through `ragtime keys create`.
type createdKey struct{ token, id, prefix string }

// createKey runs `ragtime keys create` and returns what it printed once.
func createKey(t *testing.T, env map[string]string, args ...string) createdKey {
	t.Helper()
	out := runCmd(t, env, append([]string{"keys", "create"}, args...)...)
	tok, ids := tokenRE.FindStringSubmatch(out), createdRE.FindStringSubmatch(out)
	if tok == nil || ids == nil {
		t.Fatalf("keys create printed no token or id:\n%s", out)
	}
	if !strings.HasPrefix(tok[1], ids[2]+"_") {
		t.Fatalf("token %s… does not start with the prefix %s", tok[1][:12], ids[2])
	}
	return createdKey{token: tok[1], id: ids[1], prefix: ids[2]}
}

// call sends one request with an optional bearer token and headers (a
// "Host" one sets the request's Host) and returns the status, the headers
// and the body.
func call(t *testing.T, method, url, token string, body io.Reader, headers map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// hintedErr decodes {"error": {...}} with its hint.
type hintedErr struct {
	Error struct{ Code, Message, Hint string } `json:"error"`
}

func TestKeysCLIRoundTrip(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}

	// keys list names the database it read, never the password (the test
	// server trusts local connections, so any password connects).
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "hunter2-keys-list")
	out := runCmd(t, map[string]string{"DATABASE_URL": u.String()}, "keys", "list")
	if want := "no API keys in " + u.Host + u.Path + ":"; !strings.Contains(out, want) || strings.Contains(out, "hunter2") {
		t.Errorf("keys list on an empty table: %s, want %q and no password", out, want)
	}
	k := createKey(t, env, "--name", "ci", "--scopes", "ask,read", "--rate", "30/min", "--concurrency", "2",
		"--models", "m1,m2", "--filter", "metadata.tenant=a", "--filter", "doc_id=a.md", "--expires", "90d")
	pub := createKey(t, env, "--name", "web", "--kind", "publishable", "--origins", "https://App.example.com")

	out = runCmd(t, env, "keys", "list")
	for _, want := range []string{"2 API keys in " + u.Host + u.Path + ":", k.id, k.prefix, "ci", "ask,read", "30/min, 2 at once", "m1,m2", "doc_id=a.md metadata.tenant=a",
		"expires ", pub.prefix, "publishable", "https://app.example.com", "60/min"} {
		if !strings.Contains(out, want) {
			t.Errorf("keys list lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, k.token) || strings.Contains(out, k.token[len(k.prefix)+1:]) {
		t.Error("keys list shows a secret")
	}
	var hashes int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE hash = sha256(convert_to($1, 'UTF8'))`, k.token).Scan(&hashes); err != nil || hashes != 1 {
		t.Errorf("the stored hash is not the token's SHA-256 (%d rows, %v)", hashes, err)
	}

	out = runCmd(t, env, "keys", "revoke", k.prefix)
	if !strings.Contains(out, "revoked secret key \"ci\"") {
		t.Errorf("keys revoke said %q", out)
	}
	if out = runCmd(t, env, "keys", "list"); !strings.Contains(out, "revoked ") {
		t.Errorf("keys list after revoke:\n%s", out)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"keys", "create", "--name", "x"}, "--scopes"},
		{[]string{"keys", "create", "--scopes", "ask"}, "--name"},
		{[]string{"keys", "create", "--name", "x", "--scopes", "ask,write"}, "write"},
		{[]string{"keys", "create", "--name", "x", "--kind", "publishable"}, "--origins"},
		{[]string{"keys", "create", "--name", "x", "--kind", "publishable", "--origins", "app.example.com"}, "scheme://host"},
		{[]string{"keys", "create", "--name", "x", "--scopes", "admin", "--filter", "doc_id=a"}, "tenant"},
		{[]string{"keys", "create", "--name", "x", "--scopes", "ask", "--filter", "tenant=a"}, "metadata.KEY=VALUE"},
		{[]string{"keys", "create", "--name", "x", "--scopes", "ask", "--rate", "lots"}, "--rate"},
		{[]string{"keys", "revoke", "rt_sk_aaaaaaaaaaaa"}, "no API key"},
		{[]string{"keys", "frob"}, "create, list or revoke"},
	} {
		var o, e syncBuffer
		err := run(context.Background(), tt.args, envMap(env), &o, &e)
		if err == nil || !strings.Contains(err.Error(), tt.want) || exitCode(err) != 2 {
			t.Errorf("ragtime %v: %v, want a usage error mentioning %q", tt.args, err, tt.want)
		}
	}
}

func TestAuthErrorsOverHTTP(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dir := ingestCorpus(t, env)

	admin := createKey(t, env, "--name", "admin", "--scopes", "admin")
	asker := createKey(t, env, "--name", "asker", "--scopes", "ask", "--models", "small")
	scraper := createKey(t, env, "--name", "prometheus", "--scopes", "metrics")
	pub := createKey(t, env, "--name", "web", "--kind", "publishable", "--origins", "https://app.example.com")
	revoked := createKey(t, env, "--name", "gone", "--scopes", "ask")
	runCmd(t, env, "keys", "revoke", revoked.id)
	expired := createKey(t, env, "--name", "old", "--scopes", "ask", "--expires", "1h")
	if _, err := pool.Exec(context.Background(), `UPDATE api_keys SET expires_at = now() - interval '1 minute' WHERE id = $1`, expired.id); err != nil {
		t.Fatal(err)
	}

	srv := startServe(t, env, "--data-dir", dir)
	_, wrongPrefix, _, _ := auth.NewToken(auth.Secret)
	tests := []struct {
		name, method, path, token string
		headers                   map[string]string
		status                    int
		code, mention             string
	}{
		{"no key", "GET", "/v1/queries", "", nil, 401, "auth_missing", ""},
		{"no key, ask", "GET", "/ask?q=prefill", "", nil, 401, "auth_missing", ""},
		{"garbage", "GET", "/v1/queries", "not-a-key", nil, 401, "auth_invalid", ""},
		{"unknown prefix", "GET", "/v1/queries", wrongPrefix + "_" + strings.Repeat("A", 43), nil, 401, "auth_invalid", ""},
		{"wrong secret", "GET", "/v1/queries", admin.prefix + "_" + strings.Repeat("A", 43), nil, 401, "auth_invalid", ""},
		{"basic auth", "GET", "/v1/queries", "", map[string]string{"Authorization": "Basic YTpi"}, 401, "auth_invalid", ""},
		{"secret key in the URL", "GET", "/ask?q=prefill&key=" + admin.token, "", nil, 401, "auth_invalid", "Authorization"},
		{"revoked", "GET", "/ask?q=prefill", revoked.token, nil, 401, "auth_revoked", revoked.prefix},
		{"expired", "GET", "/ask?q=prefill", expired.token, nil, 401, "auth_expired", expired.prefix},
		{"scope", "GET", "/v1/documents", asker.token, nil, 403, "scope_denied", "documents"},
		{"scope metrics", "GET", "/metrics", asker.token, nil, 403, "scope_denied", "metrics"},
		{"publishable reading", "GET", "/v1/queries?key=" + pub.token, "", map[string]string{"Origin": "https://app.example.com"}, 403, "scope_denied", ""},
		{"publishable, wrong origin", "GET", "/ask?q=prefill&key=" + pub.token, "", map[string]string{"Origin": "https://evil.example"}, 403, "origin_denied", "https://app.example.com"},
		{"publishable, no origin", "GET", "/ask?q=prefill&key=" + pub.token, "", nil, 403, "origin_denied", ""},
		{"model outside the key's", "GET", "/ask?q=prefill&model=large", asker.token, nil, 403, "model_denied", "small"},
	}
	for _, tt := range tests {
		status, h, body := call(t, tt.method, srv.url+tt.path, tt.token, nil, tt.headers)
		var e hintedErr
		if err := json.Unmarshal(body, &e); err != nil || status != tt.status || e.Error.Code != tt.code {
			t.Errorf("%s: %d %s, want %d %s", tt.name, status, body, tt.status, tt.code)
			continue
		}
		if !strings.HasPrefix(h.Get("Content-Type"), "application/json") || e.Error.Hint == "" {
			t.Errorf("%s: content type %q, hint %q: want JSON with a hint before any stream", tt.name, h.Get("Content-Type"), e.Error.Hint)
		}
		if !strings.Contains(e.Error.Message+" "+e.Error.Hint, tt.mention) {
			t.Errorf("%s: message %q does not mention %q", tt.name, e.Error.Message, tt.mention)
		}
		if status == 401 && h.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tt.name)
		}
		for _, k := range []createdKey{admin, asker, pub, revoked, expired} {
			if bytes.Contains(body, []byte(k.token[len(k.prefix):])) {
				t.Errorf("%s: the response holds a key's secret", tt.name)
			}
		}
	}

	// What the keys may do, they do.
	if events := askWith(t, srv.url, "/ask?q=what+is+prefill", asker.token, nil); lastName(events) != "done" {
		t.Errorf("the asker's ask ended with %s", lastName(events))
	}
	if events := askWith(t, srv.url, "/ask?q=what+is+prefill&key="+pub.token, "", map[string]string{"Origin": "https://app.example.com"}); lastName(events) != "done" {
		t.Errorf("the publishable key's ask ended with %s", lastName(events))
	}
	if status, h, _ := call(t, "OPTIONS", srv.url+"/ask", "", nil, map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "GET"}); h.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("preflight from the publishable key's origin: %d, allow-origin %q", status, h.Get("Access-Control-Allow-Origin"))
	}
	if status, _, body := call(t, "GET", srv.url+"/metrics", admin.token, nil, nil); status != 200 {
		t.Errorf("admin /metrics: %d %s", status, body)
	}
	// A metrics key scrapes /metrics and reads nothing else.
	if status, _, body := call(t, "GET", srv.url+"/metrics", scraper.token, nil, nil); status != 200 || !bytes.Contains(body, []byte("ragtime_")) {
		t.Errorf("metrics key /metrics: %d %.200s", status, body)
	}
	for _, path := range []string{"/v1/queries", "/v1/stats", "/v1/documents", "/ask?q=prefill"} {
		if status, _, body := call(t, "GET", srv.url+path, scraper.token, nil, nil); status != 403 || !bytes.Contains(body, []byte("scope_denied")) {
			t.Errorf("metrics key %s: %d %s, want 403 scope_denied", path, status, body)
		}
	}
	if _, _, body := call(t, "GET", srv.url+"/readyz", scraper.token, nil, nil); string(bytes.TrimSpace(body)) != `{"status":"ok"}` {
		t.Errorf("/readyz with a metrics key shows the checks: %s", body)
	}

	// /readyz: ready or not for everyone, the checks only for admin.
	_, _, body := call(t, "GET", srv.url+"/readyz", "", nil, nil)
	if string(bytes.TrimSpace(body)) != `{"status":"ok"}` {
		t.Errorf("/readyz without a key: %s", body)
	}
	if _, _, body = call(t, "GET", srv.url+"/readyz", admin.token, nil, nil); !bytes.Contains(body, []byte(`"postgres":"ok"`)) {
		t.Errorf("/readyz with the admin key: %s", body)
	}

	// A key revoked while serve runs is refused within --keys-reload.
	runCmd(t, env, "keys", "revoke", asker.prefix)
	eventually(t, "the revoked key to be refused", func() bool {
		status, _, body := call(t, "GET", srv.url+"/ask?q=prefill", asker.token, nil, nil)
		return status == 401 && bytes.Contains(body, []byte("auth_revoked"))
	})
	// No token or secret in the log or the database.
	var dump string
	if err := pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(q::text, ''), '') FROM queries q`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	for _, k := range []createdKey{admin, asker, pub, revoked, expired} {
		secret := k.token[len(k.prefix)+1:]
		if strings.Contains(srv.stderr.String(), secret) || strings.Contains(dump, secret) {
			t.Errorf("key %s's secret reached the log or the queries table", k.prefix)
		}
	}
	eventually(t, "last use to be written", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM api_keys WHERE last_used_at IS NOT NULL AND id = ANY($1::uuid[])`,
			[]string{admin.id, asker.id, pub.id}).Scan(&n)
		return n == 3
	})
}

// askWith sends a GET /ask with a bearer token and headers and returns its
// events; a non-200 answer fails the test.
func askWith(t *testing.T, base, path, token string, headers map[string]string) []sseEvent {
	t.Helper()
	status, _, body := call(t, "GET", base+path, token, nil, headers)
	if status != 200 {
		t.Fatalf("GET %s: %d %s", path, status, body)
	}
	return readEvents(t, bytes.NewReader(body), nil)
}

func lastName(events []sseEvent) string {
	if len(events) == 0 {
		return "(none)"
	}
	return events[len(events)-1].Name
}

func TestOpenOnlyOnLoopbackWithoutKeys(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", t.TempDir())
	if !strings.Contains(srv.stderr.String(), "no API keys: running open on loopback") {
		t.Errorf("no startup line saying serve runs open:\n%s", srv.stderr.String())
	}
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		var o, e syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := run(ctx, []string{"serve", "--addr", addr, "--data-dir", t.TempDir()}, envMap(env), &o, &e)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "refusing to serve") || !strings.Contains(err.Error(), "--insecure-no-auth") {
			t.Errorf("serve --addr %s without keys: %v, want a refusal naming --insecure-no-auth", addr, err)
		}
	}
	var o, e syncBuffer
	err := run(context.Background(), []string{"serve", "--cors-origins", "app.example.com", "--data-dir", t.TempDir()}, envMap(env), &o, &e)
	if err == nil || !strings.Contains(err.Error(), "--cors-origins") || !strings.Contains(err.Error(), "scheme://host") {
		t.Errorf("--cors-origins without a scheme: %v", err)
	}
}

// TestCrossSiteWritesRefusedWithoutKeys: the CSRF of the issue, a page on
// another site posting a form to /v1/documents, is refused unless that site
// is in --cors-origins; curl-like clients without Origin still write.
func TestCrossSiteWritesRefusedWithoutKeys(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", t.TempDir())
	trusting := startServe(t, env, "--data-dir", t.TempDir(), "--cors-origins", "https://evil.example")

	post := func(base string, headers map[string]string) (int, []byte) {
		body, ct := multipartBody(t, map[string]string{"x.md": "# X\n\nplanted by another site"})
		h := map[string]string{"Content-Type": ct}
		for k, v := range headers {
			h[k] = v
		}
		status, _, b := call(t, "POST", base+"/v1/documents", "", bytes.NewReader(body), h)
		return status, b
	}
	for _, h := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "cross-site"},
	} {
		status, body := post(srv.url, h)
		if status != 403 || !bytes.Contains(body, []byte("cross_site_denied")) {
			t.Errorf("cross-site multipart POST %v: %d %s, want 403 cross_site_denied", h, status, body)
		}
	}
	status, _, body := call(t, "DELETE", srv.url+"/v1/documents/x.md", "", nil, map[string]string{"Origin": "https://evil.example"})
	if status != 403 {
		t.Errorf("cross-site DELETE: %d %s", status, body)
	}
	var docs struct{ Count int }
	_, _, listed := call(t, "GET", srv.url+"/v1/documents", "", nil, nil)
	if err := json.Unmarshal(listed, &docs); err != nil || docs.Count != 0 {
		t.Errorf("after refused writes the index holds %s", listed)
	}
	for _, h := range []map[string]string{nil, {"Origin": srv.url, "Sec-Fetch-Site": "same-origin"}} {
		if status, body := post(srv.url, h); status != 200 {
			t.Errorf("POST with %v: %d %s, want 200", h, status, body)
		}
	}
	if status, body := post(trusting.url, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); status != 200 {
		t.Errorf("POST from an origin in --cors-origins: %d %s", status, body)
	}
}

func TestPagesSendSecurityHeaders(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	srv := startServe(t, map[string]string{"DATABASE_URL": dbURL}, "--data-dir", t.TempDir())
	inline := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`)
	// /queries/x names no query (not a UUID): its page comes with 404,
	// and with the same headers.
	for path, want := range map[string]int{"/": 200, "/queries": 200, "/queries/" + uuidZero: 200, "/queries/x": 404, "/dashboard": 200} {
		status, h, body := call(t, "GET", srv.url+path, "", nil, nil)
		csp := h.Get("Content-Security-Policy")
		if status != want || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-eval") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(strings.SplitN(strings.SplitN(csp, "script-src", 2)[1], ";", 2)[0], "unsafe-inline") {
			t.Errorf("%s: %d, CSP %q", path, status, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" {
			t.Errorf("%s: nosniff %q, Referrer-Policy %q", path, h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
		}
		if inline.Match(body) {
			t.Errorf("%s has an inline script", path)
		}
	}
	_, h, _ := call(t, "GET", srv.url+"/v1/queries", "", nil, nil)
	if h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("API responses: %v", h)
	}
}

// TestTenantKeyNeverSeesAnotherTenantsChunks: a key created with --filter
// metadata.tenant=a (or doc_id=...) searches only tenant a's documents in
// both stores, whatever filters the request sends.
func TestTenantKeyNeverSeesAnotherTenantsChunks(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"embedded", "qdrant"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dbURL, _ := testDB(t)
			env := map[string]string{"DATABASE_URL": dbURL}
			args := []string{"--data-dir", t.TempDir()}
			if store == "qdrant" {
				_, addr := qdranttest.Start(t)
				args = append(args, "--store", "qdrant", "--qdrant-url", addr, "--qdrant-collection", "tenants")
			}
			admin := createKey(t, env, "--name", "admin", "--scopes", "admin")
			byMeta := createKey(t, env, "--name", "tenant a", "--scopes", "ask,read", "--filter", "metadata.tenant=a")
			byDoc := createKey(t, env, "--name", "a's docs", "--scopes", "ask", "--filter", "doc_id=a-prefill.md,a-decode.md")
			srv := startServe(t, env, args...)

			addTenantDocs(t, srv.url, admin.token, []tenantDoc{
				{"a-prefill.md", "a", "# Prefill at A\n\nPrefill reads the whole prompt before the first token; tenant A measures prefill time."},
				{"a-decode.md", "a", "# Decode at A\n\nDecode writes one token at a time after prefill."},
				{"b-prefill.md", "b", "# Prefill at B\n\nPrefill prefill prefill: tenant B's secret notes on prefill time and prompt tokens."},
				{"b-budget.md", "b", "# Budget at B\n\nTenant B's confidential budget for prefill hardware."},
			})
			// The admin key sees both tenants: the question does match B.
			if got := sourcesOf(t, postAskWith(t, srv.url, admin.token, `{"question": "tenant B prefill secret notes", "top_k": 4, "rerank_top_n": 0}`)); !containsPrefix(got, "b-") {
				t.Fatalf("the admin key's sources %v hold no tenant B document: the test would prove nothing", got)
			}
			for _, k := range []createdKey{byMeta, byDoc} {
				for _, body := range []string{
					`{"question": "tenant B prefill secret notes", "top_k": 4, "rerank_top_n": 0}`,
					`{"question": "tenant B prefill secret notes", "top_k": 4, "rerank_top_n": 0, "filters": {"metadata": {"tenant": "b"}}}`,
					`{"question": "tenant B prefill secret notes", "top_k": 4, "rerank_top_n": 0, "filters": {"doc_id": ["b-prefill.md", "b-budget.md"]}}`,
					`{"question": "tenant B prefill secret notes", "top_k": 4, "rerank_top_n": 0, "filters": {"doc_id": ["b-prefill.md", "a-decode.md"]}}`,
				} {
					events := postAskWith(t, srv.url, k.token, body)
					if lastName(events) != "done" {
						t.Errorf("%s %s: ended with %s", k.prefix, body, lastName(events))
					}
					for _, id := range sourcesOf(t, events) {
						if !strings.HasPrefix(id, "a-") {
							t.Errorf("key %q asking %s saw %s", k.prefix, body, id)
						}
					}
					for _, e := range events {
						if e.Name == "token" && bytes.Contains(e.Data, []byte("B's")) {
							t.Errorf("key %q asking %s got tenant B's text in the answer", k.prefix, body)
						}
					}
				}
			}
			// The key's own filter still finds its documents.
			if got := sourcesOf(t, postAskWith(t, srv.url, byMeta.token, `{"question": "prefill time", "top_k": 4, "rerank_top_n": 0}`)); len(got) == 0 {
				t.Error("the tenant key finds nothing of its own")
			}
		})
	}
}

// tenantDoc is a document of one tenant (its metadata's tenant).
type tenantDoc struct{ id, tenant, text string }

// addTenantDocs adds docs through POST /v1/documents; a failure stops the
// test.
func addTenantDocs(t *testing.T, base, token string, docs []tenantDoc) {
	t.Helper()
	for _, d := range docs {
		body, _ := json.Marshal(map[string]any{"id": d.id, "title": d.id, "text": d.text, "metadata": map[string]string{"tenant": d.tenant}})
		if status, _, b := call(t, "POST", base+"/v1/documents", token, bytes.NewReader(body), map[string]string{"Content-Type": "application/json"}); status != 200 {
			t.Fatalf("adding %s: %d %s", d.id, status, b)
		}
	}
}

func containsPrefix(ids []string, prefix string) bool {
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			return true
		}
	}
	return false
}

// postAskWith sends POST /ask with a bearer token; a non-200 answer fails.
func postAskWith(t *testing.T, base, token, body string) []sseEvent {
	t.Helper()
	status, _, b := call(t, "POST", base+"/ask", token, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
	if status != 200 {
		t.Fatalf("POST /ask %s: %d %s", body, status, b)
	}
	return readEvents(t, bytes.NewReader(b), nil)
}

// TestKeysReadTheirOwnQueries: a query row carries its key; a read key sees
// only its own queries in /v1/queries, /v1/queries/:id and /v1/stats, an
// admin key every one.
func TestKeysReadTheirOwnQueries(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dir := ingestCorpus(t, env)
	admin := createKey(t, env, "--name", "admin", "--scopes", "admin")
	a := createKey(t, env, "--name", "a", "--scopes", "ask,read")
	b := createKey(t, env, "--name", "b", "--scopes", "ask,read")
	srv := startServe(t, env, "--data-dir", dir)

	queryID := func(events []sseEvent) string {
		var m struct {
			QueryID string `json:"query_id"`
		}
		events[0].decode(t, &m)
		return m.QueryID
	}
	idA := queryID(askWith(t, srv.url, "/ask?q=what+is+prefill", a.token, nil))
	idB := queryID(askWith(t, srv.url, "/ask?q=what+is+decode", b.token, nil))
	askWith(t, srv.url, "/ask?q=what+is+decode+again", b.token, nil)
	eventually(t, "the three queries to be stored", func() bool { return countRows(t, pool, "queries") == 3 })
	var stored string
	if err := pool.QueryRow(context.Background(), `SELECT key_id::text FROM queries WHERE id = $1`, idA).Scan(&stored); err != nil || stored != a.id {
		t.Fatalf("query %s stored with key %q (%v), want %s", idA, stored, err, a.id)
	}

	list := func(token string) []string {
		status, _, body := call(t, "GET", srv.url+"/v1/queries", token, nil, nil)
		var page struct {
			Queries []struct {
				ID string `json:"query_id"`
			}
		}
		if err := json.Unmarshal(body, &page); err != nil || status != 200 {
			t.Fatalf("GET /v1/queries: %d %s", status, body)
		}
		var ids []string
		for _, q := range page.Queries {
			ids = append(ids, q.ID)
		}
		return ids
	}
	if got := list(a.token); len(got) != 1 || got[0] != idA {
		t.Errorf("key a lists %v, want only %s", got, idA)
	}
	if got := list(b.token); len(got) != 2 {
		t.Errorf("key b lists %v, want its 2", got)
	}
	if got := list(admin.token); len(got) != 3 {
		t.Errorf("the admin key lists %v, want all 3", got)
	}
	if status, _, body := call(t, "GET", srv.url+"/v1/queries/"+idB, a.token, nil, nil); status != 404 {
		t.Errorf("key a reading b's query: %d %s, want 404", status, body)
	}
	if status, _, body := call(t, "GET", srv.url+"/v1/queries/"+idA, a.token, nil, nil); status != 200 || !bytes.Contains(body, []byte(`"key_id":"`+a.id+`"`)) {
		t.Errorf("key a reading its own query: %d %s", status, body)
	}
	if status, _, _ := call(t, "GET", srv.url+"/v1/queries/"+idB, admin.token, nil, nil); status != 200 {
		t.Errorf("the admin key reading b's query: %d", status)
	}
	stats := func(token string) int {
		status, _, body := call(t, "GET", srv.url+"/v1/stats?since=1h", token, nil, nil)
		var st struct{ Totals struct{ Queries int } }
		if err := json.Unmarshal(body, &st); err != nil || status != 200 {
			t.Fatalf("GET /v1/stats: %d %s", status, body)
		}
		return st.Totals.Queries
	}
	if na, nb, nall := stats(a.token), stats(b.token), stats(admin.token); na != 1 || nb != 2 || nall != 3 {
		t.Errorf("stats totals: a %d, b %d, admin %d; want 1, 2, 3", na, nb, nall)
	}
}

// TestKeysSurviveAPostgresOutageAtStart: the keys serve read are kept in a
// snapshot under --data-dir (hashes only, mode 0600), and a keyring that
// cannot reach Postgres checks keys against it; with neither it fails
// closed.
func TestKeysSurviveAPostgresOutageAtStart(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	k := createKey(t, env, "--name", "ci", "--scopes", "ask")
	log := slog.New(slog.DiscardHandler)
	snap := filepath.Join(t.TempDir(), "data", keysSnapshotFile)

	loadKeys(context.Background(), auth.NewKeyring(), postgres.NewKeys(pool), snap, log)
	info, err := os.Stat(snap)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot %v, %v: want a 0600 file", info, err)
	}
	raw, _ := os.ReadFile(snap)
	if !bytes.Contains(raw, []byte(k.prefix)) || bytes.Contains(raw, []byte(k.token[len(k.prefix)+1:])) {
		t.Errorf("the snapshot must name the key's prefix and never hold its secret:\n%s", raw)
	}

	away, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer away.Close()
	fromSnap := auth.NewKeyring()
	loadKeys(context.Background(), fromSnap, postgres.NewKeys(away), snap, log)
	if key, err := fromSnap.Authenticate(k.token, time.Now()); err != nil || key.ID != k.id {
		t.Errorf("from the snapshot: %v, %v", key, err)
	}
	blind := auth.NewKeyring()
	loadKeys(context.Background(), blind, postgres.NewKeys(away), filepath.Join(t.TempDir(), "none.json"), log)
	if _, err := blind.Authenticate(k.token, time.Now()); !errors.Is(err, auth.ErrUnavailable) || !blind.Enabled() {
		t.Errorf("with neither Postgres nor a snapshot: %v, enabled %v; want ErrUnavailable (fail closed)", err, blind.Enabled())
	}
}

// TestPublishableKeyRateIsPerVisitor: a publishable key sits in every
// visitor's browser, so its rate counts per key and client address: one
// visitor spending it leaves the others theirs.
func TestPublishableKeyRateIsPerVisitor(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dir := ingestCorpus(t, env)
	pub := createKey(t, env, "--name", "site", "--kind", "publishable", "--origins", "https://app.example.com", "--rate", "6/min") // a burst of 1
	srv := startServe(t, env, "--data-dir", dir)
	from := func(ip string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	ask := func(c *http.Client) (int, string) {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.url+"/ask?q=prefill&max_tokens=2&key="+pub.token, nil)
		req.Header.Set("Origin", "https://app.example.com")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	first, second := from("127.0.0.1"), from("127.0.0.2")
	if status, body := ask(first); status != 200 {
		t.Fatalf("visitor 1's first ask: %d %s", status, body)
	}
	if status, body := ask(first); status != 429 || !strings.Contains(body, "rate_limited") {
		t.Errorf("visitor 1's second ask: %d %s, want 429 rate_limited", status, body)
	}
	if status, body := ask(second); status != 200 {
		t.Errorf("visitor 2's first ask, after visitor 1 spent theirs: %d %s, want 200", status, body)
	}
}
