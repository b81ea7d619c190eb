package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// searchAnswerT is POST /v1/search's answer as docs/api.md describes it.
type searchAnswerT struct {
	QueryID   string `json:"query_id"`
	Retrieval string `json:"retrieval"`
	Results   []struct {
		Rank         int      `json:"rank"`
		ChunkID      string   `json:"chunk_id"`
		DocID        string   `json:"doc_id"`
		Text         string   `json:"text"`
		Score        float64  `json:"score"`
		VectorRank   *int     `json:"vector_rank"`
		VectorScore  *float64 `json:"vector_score"`
		LexicalRank  *int     `json:"lexical_rank"`
		LexicalScore *float64 `json:"lexical_score"`
		RerankScore  *float64 `json:"rerank_score"`
	} `json:"results"`
	Stages []struct {
		Name       string         `json:"name"`
		DurationMs float64        `json:"duration_ms"`
		Attrs      map[string]any `json:"attrs"`
	} `json:"stages"`
	RetrievalMs float64 `json:"retrieval_ms"`
}

func postSearch(t *testing.T, base, token, body string) (int, searchAnswerT, []byte) {
	t.Helper()
	status, _, b := call(t, "POST", base+"/v1/search", token, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
	var a searchAnswerT
	if status == 200 {
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("POST /v1/search %s: %v in %s", body, err, b)
		}
	}
	return status, a, b
}

// errorField returns the field and code of a /v1 JSON error body.
func errorField(t *testing.T, b []byte) (string, string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Field string } `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	return e.Error.Field, e.Error.Code
}

// TestHybridRetrievalEndToEnd: serve (embedded store, hash embedder,
// Postgres, hybrid by default) finds by its BM25 leg a word the hash
// embedder cannot match (another form of it), shows each leg's rank and
// score and time, refuses bad retrieval knobs naming the field, keeps
// /v1/search inside the key's scopes and tenant filter, and records each
// search in the searches table.
func TestHybridRetrievalEndToEnd(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	admin := createKey(t, env, "--name", "admin", "--scopes", "admin")
	tenantA := createKey(t, env, "--name", "tenant a", "--scopes", "ask", "--filter", "metadata.tenant=a")
	reader := createKey(t, env, "--name", "reader", "--scopes", "read")
	srv := startServe(t, env, "--data-dir", t.TempDir())

	addTenantDocs(t, srv.url, admin.token, []tenantDoc{
		{"a-pool.md", "a", "# Connection pool\n\nWhen the upstream drops a link, the pool reconnected after a backoff."},
		{"a-prefill.md", "a", "# Prefill\n\nPrefill reads the whole prompt before the first token."},
		{"a-decode.md", "a", "# Decode\n\nDecode writes one token at a time after prefill."},
		{"b-pool.md", "b", "# Pool at B\n\nTenant B's pool reconnected twice; the secret backoff table."},
		{"b-cache.md", "b", "# Cache\n\nThe prompt cache keeps the system prompt warm."},
	})

	// "reconnecting" is not a word of any document: the hash embedder
	// shares no feature with "reconnected", the stemmer does.
	_, vec, _ := postSearch(t, srv.url, admin.token, `{"query": "reconnecting", "retrieval": "vector", "top_k": 5}`)
	for _, r := range vec.Results {
		if strings.HasSuffix(r.DocID, "pool.md") && r.Rank == 1 && r.Score > 0.2 {
			t.Fatalf("the vector leg matched %s (score %v): the test would prove nothing", r.DocID, r.Score)
		}
	}
	status, lex, b := postSearch(t, srv.url, admin.token, `{"query": "reconnecting", "retrieval": "lexical", "top_k": 5}`)
	if status != 200 || len(lex.Results) != 2 || lex.Retrieval != "lexical" {
		t.Fatalf("lexical: %d %s", status, b)
	}
	for _, r := range lex.Results {
		if !strings.HasSuffix(r.DocID, "pool.md") || r.LexicalRank == nil || r.LexicalScore == nil || *r.LexicalScore <= 0 || r.VectorRank != nil {
			t.Errorf("lexical result %+v: want a pool doc with its lexical rank and score only", r)
		}
	}
	status, hyb, b := postSearch(t, srv.url, admin.token, `{"query": "reconnecting", "top_k": 3, "vector_k": 5, "lexical_k": 5}`)
	if status != 200 || hyb.Retrieval != "hybrid" || len(hyb.Results) != 3 {
		t.Fatalf("hybrid (the default): %d %s", status, b)
	}
	if top := hyb.Results[0]; !strings.HasSuffix(top.DocID, "pool.md") || top.LexicalRank == nil || top.VectorRank == nil {
		t.Errorf("hybrid's first %+v: want a pool doc found by both legs", top)
	}
	var search map[string]any
	for _, s := range hyb.Stages {
		if s.Name == "search" {
			search = s.Attrs
		}
	}
	for _, k := range []string{"vector_ms", "lexical_ms", "fusion_ms"} {
		if _, ok := search[k].(float64); !ok {
			t.Errorf("search stage attrs %v: no %s", search, k)
		}
	}
	if search["retrieval"] != "hybrid" || search["fusion"] != "weighted" || search["lexical_k"] != 5.0 || search["vector_k"] != 5.0 {
		t.Errorf("search stage attrs %v", search)
	}
	// Reranking on request keeps top_k chunks by default.
	if status, rr, b := postSearch(t, srv.url, admin.token, `{"query": "reconnecting pool", "top_k": 4, "rerank": true}`); status != 200 || len(rr.Results) != 4 || rr.Results[0].RerankScore == nil {
		t.Errorf("rerank: %d %s", status, b)
	}

	// Bad knobs name their field, on every door.
	for _, c := range []struct{ method, path, body, field string }{
		{"POST", "/v1/search", `{"query": "x", "retrieval": "semantic"}`, "retrieval"},
		{"POST", "/v1/search", `{"query": "x", "vector_k": 0}`, "vector_k"},
		{"POST", "/v1/search", `{"query": "x", "lexical_k": 5000}`, "lexical_k"},
		{"POST", "/v1/search", `{"top_k": 3}`, "query"},
		{"POST", "/v1/search", `{"query": "x", "top_k": 0}`, "top_k"},
		{"POST", "/v1/search", `{"query": "x", "rerank": false, "rerank_top_n": 2}`, "rerank_top_n"},
		{"POST", "/v1/search", `{"query": "x", "lexcal_k": 5}`, "lexcal_k"},
		{"POST", "/ask", `{"question": "x", "retrieval": "dense"}`, "retrieval"},
		{"POST", "/ask", `{"question": "x", "vector_k": -1}`, "vector_k"},
		{"GET", "/ask?q=x&lexical_k=abc", "", "lexical_k"},
		{"GET", "/ask?q=x&retrieval=both", "", "retrieval"},
		{"POST", "/v1/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": "x"}], "ragtime": {"retrieval": "bm25"}}`, "ragtime.retrieval"},
		{"POST", "/v1/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": "x"}], "ragtime": {"lexical_k": 0}}`, "ragtime.lexical_k"},
		{"POST", "/v1/search", `{"query": "x", "collapse": "page"}`, "collapse"},
		{"POST", "/ask", `{"question": "x", "collapse": "chunk"}`, "collapse"},
		{"GET", "/ask?q=x&collapse=docs", "", "collapse"},
		{"POST", "/v1/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": "x"}], "ragtime": {"collapse": "all"}}`, "ragtime.collapse"},
	} {
		var body *strings.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		var status int
		var b []byte
		if body != nil {
			status, _, b = call(t, c.method, srv.url+c.path, admin.token, body, map[string]string{"Content-Type": "application/json"})
		} else {
			status, _, b = call(t, c.method, srv.url+c.path, admin.token, nil, nil)
		}
		if status != http.StatusBadRequest {
			t.Errorf("%s %s %s: %d %s, want 400", c.method, c.path, c.body, status, b)
			continue
		}
		if c.path == "/v1/chat/completions" {
			var e struct {
				Error struct{ Param string } `json:"error"`
			}
			json.Unmarshal(b, &e)
			if e.Error.Param != c.field {
				t.Errorf("%s %s: param %q, want %q (%s)", c.path, c.body, e.Error.Param, c.field, b)
			}
			continue
		}
		if field, _ := errorField(t, b); field != c.field {
			t.Errorf("%s %s %s: field %q, want %q (%s)", c.method, c.path, c.body, field, c.field, b)
		}
	}

	// Scopes and tenant filters: a read key may not search; tenant a's key
	// never sees tenant b's chunks through either leg, whatever it asks.
	if status, _, b := postSearch(t, srv.url, reader.token, `{"query": "pool"}`); status != http.StatusForbidden {
		t.Errorf("a read key searched: %d %s", status, b)
	}
	if status, _, _ := postSearch(t, srv.url, "", `{"query": "pool"}`); status != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", status)
	}
	if _, all, _ := postSearch(t, srv.url, admin.token, `{"query": "secret backoff table pool reconnected", "top_k": 5}`); len(all.Results) == 0 || !strings.HasPrefix(all.Results[0].DocID, "b-") {
		t.Fatalf("the admin key does not find tenant B first: the test would prove nothing: %+v", all.Results)
	}
	for _, mode := range []string{"hybrid", "vector", "lexical"} {
		for _, filter := range []string{``, `, "filter": {"metadata": {"tenant": "b"}}`, `, "filter": {"doc_id": ["b-pool.md"]}`} {
			body := `{"query": "secret backoff table pool reconnected", "top_k": 5, "retrieval": "` + mode + `"` + filter + `}`
			status, a, b := postSearch(t, srv.url, tenantA.token, body)
			if status != 200 {
				t.Fatalf("tenant a %s: %d %s", body, status, b)
			}
			for _, r := range a.Results {
				if !strings.HasPrefix(r.DocID, "a-") {
					t.Errorf("tenant a's key asking %s saw %s", body, r.DocID)
				}
			}
		}
	}

	// Every search (not the refused ones) is recorded, apart from asks.
	deadline := time.Now().Add(10 * time.Second)
	var n, hybrids int
	for time.Now().Before(deadline) {
		pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE retrieval = 'hybrid' AND lexical_ms IS NOT NULL AND vector_ms IS NOT NULL) FROM searches`).Scan(&n, &hybrids)
		if n >= 14 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n != 14 || hybrids != 6 {
		t.Errorf("searches table: %d rows (%d hybrid with both legs' times), want 14 (6)", n, hybrids)
	}
	var views int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM retrieval_latency`).Scan(&views); err != nil || views == 0 {
		t.Errorf("retrieval_latency: %d rows, %v", views, err)
	}
	if q := countRows(t, pool, "queries"); q != 0 {
		t.Errorf("%d searches recorded as asks", q)
	}

	// An ask retrieves the same way: the meta event names the retrieval,
	// the sources carry each leg's rank and score.
	events := postAskWith(t, srv.url, admin.token, `{"question": "reconnecting", "top_k": 3, "rerank_top_n": 0}`)
	for _, e := range events {
		switch e.Name {
		case "meta":
			var m struct{ Retrieval string }
			e.decode(t, &m)
			if m.Retrieval != "hybrid" {
				t.Errorf("meta %s: retrieval %q", e.Data, m.Retrieval)
			}
		case "sources":
			var s struct {
				Sources []struct {
					DocID       string `json:"doc_id"`
					LexicalRank *int   `json:"lexical_rank"`
				}
			}
			e.decode(t, &s)
			if len(s.Sources) == 0 || !strings.HasSuffix(s.Sources[0].DocID, "pool.md") || s.Sources[0].LexicalRank == nil {
				t.Errorf("sources %s: want a pool doc first, with its lexical rank", e.Data)
			}
		}
	}
	// The ask's record names its retrieval mode, in the row and in
	// /v1/queries, which lists by it.
	postAskWith(t, srv.url, admin.token, `{"question": "reconnecting", "top_k": 3, "rerank_top_n": 0, "retrieval": "lexical"}`)
	var modes string
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		pool.QueryRow(context.Background(), `SELECT string_agg(coalesce(retrieval, 'null'), ',' ORDER BY created_at) FROM queries`).Scan(&modes)
		if strings.Count(modes, ",") >= 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if modes != "hybrid,lexical" {
		t.Errorf("queries.retrieval %q, want hybrid,lexical", modes)
	}
	status, _, b = call(t, "GET", srv.url+"/v1/queries?retrieval=lexical", admin.token, nil, nil)
	var list struct {
		Queries []struct{ Retrieval string } `json:"queries"`
	}
	if err := json.Unmarshal(b, &list); status != 200 || err != nil || len(list.Queries) != 1 || list.Queries[0].Retrieval != "lexical" {
		t.Errorf("GET /v1/queries?retrieval=lexical: %d %s", status, b)
	}
	if status, _, b := call(t, "GET", srv.url+"/v1/queries?retrieval=bm25", admin.token, nil, nil); status != 400 {
		t.Errorf("GET /v1/queries?retrieval=bm25: %d %s", status, b)
	}
}
