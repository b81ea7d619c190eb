// Package golden compares a test's output with a file under testdata/ and,
// when the tests run with -update, rewrites the file instead (as
// go/printer's tests do), so that a deliberate change of output is one
// command and a review of the diff:
//
//	go test ./api -run TestSSEFraming -update
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with the output the tests produce")

// Check compares got with testdata/name, or writes it there under -update.
func Check(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file (run with -update to write it): %v", err)
	}
	if string(got) != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is meant):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
