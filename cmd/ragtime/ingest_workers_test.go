package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIngestWorkersAndProfile: --workers 3 ingests the corpus, --cpuprofile
// and --trace leave a profile and a trace behind; --workers 0 is refused by
// name.
func TestIngestWorkersAndProfile(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	tr := filepath.Join(t.TempDir(), "ingest.trace")
	out := runCmd(t, nil, "ingest", "--data-dir", dataDir, "--workers", "3", "--cpuprofile", prof, "--trace", tr, "testdata/corpus")
	if !strings.Contains(out, "ingested 4 documents") {
		t.Errorf("ingest printed %q", out)
	}
	for flag, path := range map[string]string{"--cpuprofile": prof, "--trace": tr} {
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Errorf("%s wrote %v, %v", flag, fi, err)
		}
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"ingest", "--data-dir", t.TempDir(), "--workers", "0", "testdata/corpus"}, envMap(nil), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--workers must be at least 1, got 0") {
		t.Errorf("--workers 0: %v", err)
	}
}
