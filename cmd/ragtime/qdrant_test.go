package main

import (
	"strings"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"

	"ragtime/retrieval/qdrant/qdranttest"
)

// TestQdrantStoreEndToEnd ingests into and asks from the in-process gRPC
// Qdrant, and checks the search stage's attrs and the error event of a
// missing collection.
func TestQdrantStoreEndToEnd(t *testing.T) {
	t.Parallel()
	q, addr := qdranttest.Start(t)
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	qflags := []string{"--store", "qdrant", "--qdrant-url", addr, "--qdrant-hnsw-ef", "48", "--qdrant-collection", "docs"}

	out := runCmd(t, env, append(append([]string{"ingest"}, qflags...), "testdata/corpus")...)
	if !strings.Contains(out, "ingested 4 documents") || !strings.Contains(out, "qdrant collection docs") {
		t.Fatalf("ingest: %s", out)
	}
	if cr := qdranttest.Recorded[*qc.CreateCollection](q); len(cr) != 1 || cr[0].GetVectorsConfig().GetParams().GetSize() != 512 {
		t.Fatalf("collection created %v", cr)
	}
	again := runCmd(t, env, append(append([]string{"ingest"}, qflags...), "testdata/corpus")...)
	if !strings.Contains(again, "4 unchanged") {
		t.Errorf("second ingest did not skip unchanged documents: %s", again)
	}

	// Its own --data-dir: serve keeps its spool and key snapshot there.
	srv := startServe(t, env, append(qflags, "--data-dir", t.TempDir())...)
	d := lastDone(t, ask(t, srv.url, "q=what+is+prefill&top_k=3"))
	var search map[string]any
	for _, s := range d.Stages {
		if s.Name == "search" {
			search = s.Attrs
		}
	}
	if search["store"] != "qdrant" || search["ef"] != float64(48) || search["hits"] != float64(3) || search["k"] != float64(3) {
		t.Errorf("search attrs %v", search)
	}
	if qs := qdranttest.Recorded[*qc.QueryPoints](q); len(qs) == 0 || qs[len(qs)-1].GetLimit() != 3 {
		t.Errorf("queries %v", qs)
	}

	// Another collection that nobody ingested: the stream ends with an
	// error event carrying the code and the hint.
	other := startServe(t, env, "--store", "qdrant", "--qdrant-url", addr, "--qdrant-collection", "empty", "--data-dir", t.TempDir())
	events := ask(t, other.url, "q=prefill")
	last := events[len(events)-1]
	if last.Name != "error" || !strings.Contains(string(last.Data), "store_collection_missing") || !strings.Contains(string(last.Data), "ragtime ingest") {
		t.Errorf("missing collection: last event %s %s", last.Name, last.Data)
	}
}
