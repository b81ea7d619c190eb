package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"ragtime/retrieval"
)

// TestDimensionReadFromTheIndex: an index of 4,096-dimensional hash vectors
// is ingested into again and served without --embed-dimensions (the
// dimension comes from the index's files), while a --embed-dimensions that
// differs from the index's is refused by serve and ingest with both values
// in the message, before anything is opened.
func TestDimensionReadFromTheIndex(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := t.TempDir()
	runCmd(t, env, "ingest", "--data-dir", dataDir, "--embed-dimensions", "4096", "testdata/corpus/network.html")
	// A second ingest without the flag writes 4,096-dimensional vectors too.
	out := runCmd(t, env, "ingest", "--data-dir", dataDir, "testdata/corpus")
	if !strings.Contains(out, "ingested 3 documents (1 unchanged, skipped)") {
		t.Errorf("second ingest printed %q", out)
	}
	if _, dim, err := retrieval.StoredEmbedder(dataDir); err != nil || dim != 4096 {
		t.Fatalf("stored dimension %d, %v; want 4096", dim, err)
	}

	srv := startServe(t, env, "--data-dir", dataDir)
	status, a, b := postSearch(t, srv.url, "", `{"query": "What does a reused keep-alive connection skip?", "top_k": 3}`)
	if status != 200 || len(a.Results) == 0 || a.Results[0].DocID != "network.html" {
		t.Errorf("search over the 4,096-dimension index: status %d, %s", status, b)
	}
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{
		{"serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir, "--embed-dimensions", "512"},
		{"ingest", "--data-dir", dataDir, "--embed-dimensions", "512", "testdata/corpus"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, envMap(env), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--embed-dimensions 512") || !strings.Contains(err.Error(), "holds 4096-dimensional vectors") {
			t.Errorf("%s with --embed-dimensions 512 on a 4,096-dimension index: err = %v, want one naming both", args[0], err)
		}
	}
	// The same value as the index's is accepted.
	runCmd(t, env, "ingest", "--data-dir", dataDir, "--embed-dimensions", "4096", "testdata/corpus")
}
