package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"ragtime/retrieval"
)

// TestCompactCommand compacts an ingested index (its embedder read from
// the files, not from flags), refuses an empty data dir and one whose
// writer lock is held, naming the reason.
func TestCompactCommand(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	runCmd(t, nil, "ingest", "--data-dir", dataDir, "testdata/corpus")
	out := runCmd(t, nil, "compact", "--data-dir", dataDir)
	if !strings.Contains(out, "compacted the index at "+dataDir+" to generation 1") {
		t.Errorf("compact printed %q", out)
	}
	ix, err := retrieval.OpenIndex(dataDir, retrieval.IndexOptions{Dimension: 512, Embedder: retrieval.HashEmbedderName})
	if err != nil {
		t.Fatal(err)
	}
	if ix.Generation() != 1 || ix.Len() == 0 {
		t.Errorf("after compact: generation %d, %d chunks", ix.Generation(), ix.Len())
	}

	for _, tc := range []struct {
		name, dir, want string
		hold            bool
	}{
		{"empty data dir", t.TempDir(), "no index under --data-dir", false},
		{"held lock", dataDir, "compacts it in the background on its own", true},
	} {
		if tc.hold {
			w, err := retrieval.OpenIndex(tc.dir, retrieval.IndexOptions{Dimension: 512, Embedder: retrieval.HashEmbedderName, Writable: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
		}
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"compact", "--data-dir", tc.dir}, envMap(nil), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
