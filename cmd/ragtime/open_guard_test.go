package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// callHost is call with the request's Host set to host ("" keeps the
// URL's).
func callHost(t *testing.T, method, rawURL, host string, body io.Reader, headers map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
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
	dataDir := ingestCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir)
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

	trusting := startServe(t, env, "--data-dir", dataDir, "--cors-origins", "https://app.example")
	if status, body := callHost(t, "GET", trusting.url+"/ask?q=prefill", "", nil,
		map[string]string{"Origin": "https://app.example", "Sec-Fetch-Site": "cross-site"}); status != 200 {
		t.Errorf("GET /ask from an origin in --cors-origins: %d %.300s", status, body)
	}
}
