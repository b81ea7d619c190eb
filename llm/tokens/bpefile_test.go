package tokens

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// The tests of the encodings that are not embedded read their BPE files
// from tiktoken-go-loader's copies, as a binary reads them from
// RAGTIME_BPE_DIR; only the test binary links them.
func init() { bpeDir = func() fs.FS { return assets.Assets } }

// TestOnlyTheDefaultIsEmbedded: the binary carries o200k_base's BPE file
// and no other.
func TestOnlyTheDefaultIsEmbedded(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(embedded, "bpe/*")
	if err != nil || len(names) != 1 || names[0] != "bpe/"+DefaultEncoding+".tiktoken" {
		t.Errorf("embedded BPE files %v (%v), want only %s's", names, err, DefaultEncoding)
	}
	for name, sum := range bpeSHA256 {
		if _, ok := encodingSpecs[name]; !ok || len(sum) != 64 {
			t.Errorf("checksum of %q: %q", name, sum)
		}
	}
}

// TestBPEFromDirectory reads cl100k_base from a directory as
// RAGTIME_BPE_DIR names one, and refuses a missing directory, a missing
// file and a file that is not OpenAI's with errors naming the variable.
func TestBPEFromDirectory(t *testing.T) {
	t.Parallel()
	good, err := fs.ReadFile(assets.Assets, "cl100k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cl100k_base.tiktoken"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	ranks, err := loadRanksFrom("cl100k_base", os.DirFS(dir))
	if err != nil || len(ranks) != 100256 || ranks["hello"] != 15339 {
		t.Errorf("cl100k_base from a directory: %d ranks, hello=%d, %v", len(ranks), ranks["hello"], err)
	}
	tampered := fstest.MapFS{"cl100k_base.tiktoken": {Data: append([]byte("aGk= 1\n"), good...)}}
	for what, dir := range map[string]fs.FS{"unset": nil, "missing file": fstest.MapFS{}, "tampered": tampered} {
		_, err := loadRanksFrom("cl100k_base", dir)
		if err == nil || !strings.Contains(err.Error(), BPEDirEnv) || !strings.Contains(err.Error(), "cl100k_base.tiktoken") {
			t.Errorf("%s: err = %v, want one naming %s and the file", what, err, BPEDirEnv)
		}
	}
	if _, err := loadRanksFrom(DefaultEncoding, nil); err != nil {
		t.Errorf("the embedded default needs no directory: %v", err)
	}
}
