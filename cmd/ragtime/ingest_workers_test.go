package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIngestWorkersAndProfile: --workers 3 ingests the corpus and
// --cpuprofile leaves a profile behind; --workers 0 is refused by name.
func TestIngestWorkersAndProfile(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	out := runCmd(t, nil, "ingest", "--data-dir", dataDir, "--workers", "3", "--cpuprofile", prof, "testdata/corpus")
	if !strings.Contains(out, "ingested 4 documents") {
		t.Errorf("ingest printed %q", out)
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("--cpuprofile wrote %v, %v", fi, err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"ingest", "--data-dir", t.TempDir(), "--workers", "0", "testdata/corpus"}, envMap(nil), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--workers must be at least 1, got 0") {
		t.Errorf("--workers 0: %v", err)
	}
}
