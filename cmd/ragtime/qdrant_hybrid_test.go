package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	qc "github.com/qdrant/go-client/qdrant"

	"ragtime/retrieval/qdrant"
	"ragtime/retrieval/qdrant/qdranttest"
)

// TestQdrantHybridEndToEnd ingests into the in-process Qdrant, then asks
// through serve in each retrieval mode: a hybrid is one QueryBatch fused
// by Qdrant (RRF), its sources carry both legs' ranks, its legs' times are
// null (measured only together, as the search stage) and the stage sums
// stay exact; lexical sends the sparse vector alone; vector is as before.
func TestQdrantHybridEndToEnd(t *testing.T) {
	t.Parallel()
	q, addr := qdranttest.Start(t)
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	qflags := []string{"--store", "qdrant", "--qdrant-url", addr, "--qdrant-collection", "docs"}
	if out := runCmd(t, env, append(append([]string{"ingest"}, qflags...), "testdata/corpus")...); !strings.Contains(out, "ingested 4 documents") {
		t.Fatalf("ingest: %s", out)
	}
	srv := startServe(t, env, append(qflags, "--data-dir", t.TempDir(), "--fusion", "rrf")...)

	// "reused keep-alive": the network page's words; the stemmer matches
	// "reusing" to "reused".
	status, hyb, b := postSearch(t, srv.url, "", `{"query": "reusing keep-alive connections", "top_k": 3, "vector_k": 4, "lexical_k": 4}`)
	if status != 200 || hyb.Retrieval != "hybrid" || len(hyb.Results) == 0 {
		t.Fatalf("hybrid (the default on a collection with the lexical leg): %d %s", status, b)
	}
	if top := hyb.Results[0]; top.DocID != "network.html" || top.LexicalRank == nil || *top.LexicalRank != 1 || top.VectorRank == nil {
		t.Errorf("hybrid's first %+v: want network.html, first in the lexical leg and ranked by the vector leg", top)
	}
	var search map[string]any
	var stageSum float64
	for _, s := range hyb.Stages {
		if s.Name == "search" {
			search = s.Attrs
		}
		if s.Name == "embed" || s.Name == "search" || s.Name == "rerank" {
			stageSum += s.DurationMs
		}
	}
	if search["retrieval"] != "hybrid" || search["fusion"] != "rrf" || search["fused_by"] != "store" || search["store"] != "qdrant" ||
		search["vector_k"] != 4.0 || search["lexical_k"] != 4.0 || !strings.HasPrefix(search["lexical"].(string), "qdrant-sparse:bm25") {
		t.Errorf("search stage attrs %v", search)
	}
	for _, k := range []string{"vector_ms", "lexical_ms", "fusion_ms"} {
		if v, ok := search[k]; !ok || v != nil {
			t.Errorf("search attr %s = %v (present %v): want null, the legs are not timed apart on Qdrant", k, v, ok)
		}
	}
	if d := hyb.RetrievalMs - stageSum; d > 0.01 || d < -0.01 {
		t.Errorf("retrieval_ms %.3f is not the sum of its stages %.3f", hyb.RetrievalMs, stageSum)
	}
	batches := qdranttest.Recorded[*qc.QueryBatchPoints](q)
	if len(batches) != 1 || len(batches[0].GetQueryPoints()) != 3 || len(batches[0].GetQueryPoints()[0].GetPrefetch()) != 2 {
		t.Fatalf("a hybrid search sent %d batches (%v); want one: the fused query and each leg", len(batches), batches)
	}

	// Lexical: the sparse vector alone, no embedding.
	status, lex, b := postSearch(t, srv.url, "", `{"query": "reusing keep-alive connections", "retrieval": "lexical", "top_k": 3}`)
	if status != 200 || len(lex.Results) == 0 || lex.Results[0].DocID != "network.html" || lex.Results[0].VectorRank != nil || lex.Results[0].LexicalScore == nil {
		t.Fatalf("lexical: %d %s", status, b)
	}
	if b := qdranttest.Recorded[*qc.QueryBatchPoints](q); len(b) != 2 || len(b[1].GetQueryPoints()) != 1 || b[1].GetQueryPoints()[0].GetUsing() != qdrant.SparseName {
		t.Errorf("a lexical search sent %v; want one query on the sparse vector", b[len(b)-1])
	}

	// Vector, per request: one plain query, as before.
	if status, vec, b := postSearch(t, srv.url, "", `{"query": "reusing keep-alive connections", "retrieval": "vector", "top_k": 3}`); status != 200 || vec.Retrieval != "vector" || len(qdranttest.Recorded[*qc.QueryPoints](q)) != 1 {
		t.Errorf("vector: %d %s", status, b)
	}

	// An ask streams the hybrid's sources with both legs' ranks.
	events := ask(t, srv.url, "q=What+does+a+reused+keep-alive+connection+skip%3F&top_k=3")
	var sawLegs bool
	for _, e := range events {
		if e.Name == "sources" && strings.Contains(string(e.Data), `"lexical_rank":1`) && strings.Contains(string(e.Data), `"vector_rank":`) {
			sawLegs = true
		}
	}
	if d := lastDone(t, events); !sawLegs || d.QueryID == "" {
		t.Errorf("ask: sources without both legs' ranks: %v", events)
	}

	// The searches table keeps the legs' times unknown, not 0.
	deadline := time.Now().Add(10 * time.Second)
	var n, nulls int
	for time.Now().Before(deadline) {
		pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE vector_ms IS NULL AND lexical_ms IS NULL AND fusion_ms IS NULL) FROM searches WHERE retrieval = 'hybrid'`).Scan(&n, &nulls)
		if n >= 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n != 1 || nulls != 1 {
		t.Errorf("searches: %d hybrid rows, %d with the legs' times NULL; want 1 and 1", n, nulls)
	}
}

// TestQdrantCollectionWithoutLexicalLegServes: a collection created before
// the sparse vector serves vector retrieval by default; a hybrid or
// lexical ask is refused with 400 naming the fix, on every door; serve and
// sweep configured for hybrid refuse to start, naming it too.
func TestQdrantCollectionWithoutLexicalLegServes(t *testing.T) {
	t.Parallel()
	_, addr := qdranttest.Start(t)
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	host, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	c, err := qc.NewClient(&qc.Config{Host: host, Port: p, SkipCompatibilityCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// As ragtime created collections before the lexical leg.
	if err := c.CreateCollection(context.Background(), &qc.CreateCollection{CollectionName: "old",
		VectorsConfig: qc.NewVectorsConfig(&qc.VectorParams{Size: 512, Distance: qc.Distance_Cosine}),
		Metadata:      qc.NewValueMap(map[string]any{qdrant.MetaEmbedder: "hash", qdrant.MetaDimension: int64(512)})}); err != nil {
		t.Fatal(err)
	}
	qflags := []string{"--store", "qdrant", "--qdrant-url", addr, "--qdrant-collection", "old"}
	if out := runCmd(t, env, append(append([]string{"ingest"}, qflags...), "testdata/corpus")...); !strings.Contains(out, "ingested 4 documents") {
		t.Fatalf("ingest into the old collection: %s", out)
	}
	srv := startServe(t, env, append(qflags, "--data-dir", t.TempDir())...)
	if status, vec, b := postSearch(t, srv.url, "", `{"query": "keep-alive connection", "top_k": 2}`); status != 200 || vec.Retrieval != "vector" || len(vec.Results) != 2 {
		t.Errorf("default retrieval on the old collection: %d %s; want vector", status, b)
	}
	for _, door := range []struct{ method, path, body string }{
		{"POST", "/v1/search", `{"query": "keep-alive", "retrieval": "hybrid"}`},
		{"POST", "/v1/search", `{"query": "keep-alive", "retrieval": "lexical"}`},
		{"POST", "/ask", `{"question": "keep-alive", "retrieval": "hybrid"}`},
		{"GET", "/ask?q=keep-alive&retrieval=lexical", ""},
	} {
		status, _, b := call(t, door.method, srv.url+door.path, "", strings.NewReader(door.body), map[string]string{"Content-Type": "application/json"})
		if status != 400 || !strings.Contains(string(b), `no sparse vector \"lexical\"`) || !strings.Contains(string(b), "ragtime ingest --store qdrant") {
			t.Errorf("%s %s %s on the old collection: %d %s; want 400 naming the missing sparse vector and the fix", door.method, door.path, door.body, status, b)
		}
	}
	for _, cmd := range [][]string{
		append([]string{"serve", "--retrieval", "hybrid", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, qflags...),
		append([]string{"sweep", "--retrieval", "hybrid", "--questions", "testdata/sweep/questions.tsv"}, qflags...),
	} {
		var out, errOut syncBuffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := run(ctx, cmd, envMap(env), &out, &errOut)
		cancel()
		if err == nil || !strings.Contains(err.Error(), `no sparse vector "lexical"`) || !strings.Contains(err.Error(), "re-create") {
			t.Errorf("ragtime %s on the old collection: %v\n%s\nwant a refusal naming the fix", cmd[0], err, errOut.String())
		}
	}
}
