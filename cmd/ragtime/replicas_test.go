package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"ragtime/retrieval/qdrant/qdranttest"
)

// TestTwoReplicasShareQdrantAndPostgres runs two real `ragtime serve`
// processes against one Qdrant (the contract server, which stores and
// searches points) and one Postgres: a document ingested through one is
// found by an ask through the other at once, both ingest at the same time,
// a delete through one is seen by the other, and each replica's queries are
// in the same views and in either replica's /v1/queries.
func TestTwoReplicasShareQdrantAndPostgres(t *testing.T) {
	t.Parallel()
	_, qaddr := qdranttest.Start(t)
	dbURL, pool := testDB(t)
	bin := ragtimeBinary(t)
	args := func() []string {
		return []string{"--store", "qdrant", "--qdrant-url", qaddr, "--qdrant-collection", "shared", "--data-dir", t.TempDir(),
			"--qdrant-read-consistency", "majority"}
	}
	a := startChild(t, bin, dbURL, args()...)
	b := startChild(t, bin, dbURL, args()...)

	post := func(base, id, text string) {
		t.Helper()
		status, out := doJSON(t, "POST", base+"/v1/documents", "application/json", []byte(fmt.Sprintf(`{"id":%q,"text":%q}`, id, text)))
		if status != 200 {
			t.Fatalf("POST %s to %s: %d %v", id, base, status, out)
		}
	}
	post(a.url, "prefill.md", "Prefill processes the whole prompt before the first token; its time grows with the prompt length.")
	// Asked through the other replica, right away: no reload, no cache.
	if src := sourcesOf(t, ask(t, b.url, "q="+url.QueryEscape("what does prefill process before the first token?"))); !slices.Contains(src, "prefill.md") {
		t.Fatalf("replica B's sources %v lack prefill.md, ingested through replica A", src)
	}

	// Both ingest at once: each sees both documents.
	var wg sync.WaitGroup
	for i, r := range []*child{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, out := doJSONNoFatal("POST", r.url+"/v1/documents", fmt.Sprintf(`{"id":"doc%d.md","text":"Replica %d wrote about decoding speed and tokens per second number %d."}`, i, i, i))
			if status != 200 {
				t.Errorf("concurrent POST to replica %d: %d %s", i, status, out)
			}
		}()
	}
	wg.Wait()
	for _, r := range []*child{a, b} {
		_, out := doJSON(t, "GET", r.url+"/v1/documents", "", nil)
		if out["count"].(float64) != 3 {
			t.Errorf("%s lists %v, want 3 documents", r.url, out)
		}
	}

	// A delete through B: A no longer finds it.
	if status, out := doJSON(t, "DELETE", b.url+"/v1/documents/prefill.md", "", nil); status != 204 {
		t.Fatalf("DELETE through B: %d %v", status, out)
	}
	if src := sourcesOf(t, ask(t, a.url, "q="+url.QueryEscape("what does prefill process?"))); slices.Contains(src, "prefill.md") {
		t.Errorf("replica A still finds prefill.md after B deleted it: %v", src)
	}

	// Each replica's queries land in the one Postgres: the same view, and
	// /v1/queries of either lists both.
	var ids []string
	for _, r := range []*child{a, b, a, b} {
		id, ok := askDone(http.DefaultClient, r.url, "how fast is decoding?")
		if !ok {
			t.Fatalf("no done event from %s\nstderr:\n%s", r.url, r.stderr.String())
		}
		ids = append(ids, id)
	}
	eventually(t, "every replica's queries in ttft_breakdown", func() bool {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM ttft_breakdown WHERE query_id::text = ANY($1)`, ids).Scan(&n); err != nil {
			t.Fatalf("reading ttft_breakdown: %v", err)
		}
		return n == len(ids)
	})
	for _, r := range []*child{a, b} {
		_, out := doJSON(t, "GET", r.url+"/v1/queries?limit=50", "", nil)
		var listed []string
		for _, q := range out["queries"].([]any) {
			listed = append(listed, q.(map[string]any)["query_id"].(string))
		}
		for _, id := range ids {
			if !slices.Contains(listed, id) {
				t.Errorf("%s/v1/queries lacks %s (listed %v)", r.url, id, listed)
			}
		}
	}
	for _, r := range []*child{a, b} {
		if strings.Contains(r.stderr.String(), "level=ERROR") {
			t.Errorf("replica logged an error:\n%s", r.stderr.String())
		}
	}
}

// doJSONNoFatal is doJSON for goroutines: it reports instead of failing.
func doJSONNoFatal(method, u, body string) (int, string) {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var sb strings.Builder
	_, _ = fmt.Fprint(&sb, resp.Status)
	return resp.StatusCode, sb.String()
}

// TestEmbeddedWriterAndReadOnlyFollower runs the embedded store's one
// deployment past a single process: one writing `ragtime serve` and one
// `serve --read-only` on the same data dir, as two real processes. The
// follower refuses writes with 503 read_only and a message saying why, and
// finds what the writer ingests once it rereads the index's log.
func TestEmbeddedWriterAndReadOnlyFollower(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	dataDir := t.TempDir()
	bin := ragtimeBinary(t)
	writer := startChild(t, bin, dbURL, "--data-dir", dataDir)
	follower := startChild(t, bin, dbURL, "--data-dir", dataDir, "--read-only", "--reload-interval", "100ms", "--spool-dir", t.TempDir())

	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/documents", `{"id":"x.md","text":"x"}`},
		{"DELETE", "/v1/documents/x.md", ""},
	} {
		status, out := doJSON(t, req.method, follower.url+req.path, "application/json", []byte(req.body))
		msg, _ := out["error"].(map[string]any)["message"].(string)
		if status != 503 || errCode(out) != "read_only" || !strings.Contains(msg, "--read-only") {
			t.Errorf("%s %s on the follower: %d %v, want 503 read_only naming --read-only", req.method, req.path, status, out)
		}
	}

	status, out := doJSON(t, "POST", writer.url+"/v1/documents", "application/json",
		[]byte(`{"id":"kv.md","text":"The KV cache keeps the keys and values of past tokens so decoding does not recompute them."}`))
	if status != 200 {
		t.Fatalf("POST to the writer: %d %v", status, out)
	}
	eventually(t, "the follower finds the writer's new document", func() bool {
		return slices.Contains(sourcesOf(t, ask(t, follower.url, "q="+url.QueryEscape("what does the KV cache keep?"))), "kv.md")
	})
	if status, _ := doJSON(t, "DELETE", writer.url+"/v1/documents/kv.md", "", nil); status != 204 {
		t.Fatalf("DELETE on the writer: %d", status)
	}
	eventually(t, "the follower drops the writer's deleted document", func() bool {
		_, out := doJSON(t, "GET", follower.url+"/v1/documents", "", nil)
		return out["count"].(float64) == 0
	})
}
