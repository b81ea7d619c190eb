package ragtime_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPackageMapListsEveryPackage: docs/architecture.md's package map (the
// one map; the README links to it) names every Go package of the module
// (every folder with a non-test .go file outside testdata and the modules
// of their own), and names no folder that is gone.
func TestPackageMapListsEveryPackage(t *testing.T) {
	t.Parallel()
	mapped := packageMap(t, "docs/architecture.md")
	var missing []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." {
			return filepath.SkipDir // a module of its own (deploy/grafana/gen, tools/jaeger)
		}
		if hasGoCode(t, path) && !mapped[filepath.ToSlash(path)+"/"] {
			missing = append(missing, path+"/")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("docs/architecture.md's package map (## Packages) lacks %s", strings.Join(missing, ", "))
	}
	var gone []string
	for dir := range mapped {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			gone = append(gone, dir)
		}
	}
	slices.Sort(gone)
	if len(gone) > 0 {
		t.Errorf("docs/architecture.md's package map names folders that do not exist: %s", strings.Join(gone, ", "))
	}
}

// packageMap reads the folders the map names: the lines of the code block
// under "## Packages" that start with a folder ("api/", "./" for the root).
func packageMap(t *testing.T, doc string) map[string]bool {
	t.Helper()
	f, err := os.Open(doc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mapped := map[string]bool{}
	section, block := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Packages"
		case section && strings.HasPrefix(line, "```"):
			block = !block
		case section && block && line != "" && line[0] != ' ':
			dir, _, _ := strings.Cut(line, " ")
			if strings.HasSuffix(dir, "/") {
				mapped[dir] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(mapped) == 0 {
		t.Fatalf("%s has no package map under ## Packages", doc)
	}
	return mapped
}

// hasGoCode says whether dir holds a .go file other than a test.
func hasGoCode(t *testing.T, dir string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			return true
		}
	}
	return false
}
