package pipeline_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"ragtime/postgres/postgrestest"
)

// declaredStages returns the values of the Stage* string constants the
// vocabulary's (package ragtime, the module root) non-test files declare,
// in the order they are declared.
func declaredStages(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join("..", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var stages []string
	stageConst := regexp.MustCompile(`^Stage[A-Z]`)
	for _, f := range files {
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !stageConst.MatchString(id.Name) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal", fset.Position(id.Pos()), id.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					stages = append(stages, v)
				}
			}
		}
	}
	if len(stages) == 0 {
		t.Fatal("no Stage* constants found")
	}
	return stages
}

// TestDocsListTheStages fails when a stage is added to (or removed from)
// the code but not to the lists the docs and the database give:
// docs/design.md's stage order, docs/timings.md's stage table,
// docs/metrics.md's stage histogram and the comment of query_stages.name
// in a migrated database.
func TestDocsListTheStages(t *testing.T) {
	t.Parallel()
	want := declaredStages(t)
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	name := regexp.MustCompile("`([a-z_]+)`")
	names := func(s string) []string {
		var out []string
		for _, m := range name.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}

	// design.md: the one line of the measurement contract that chains the
	// stages with arrows.
	design := regexp.MustCompile("(?m)^`[a-z_]+`( → `[a-z_]+`)+$").FindAllString(read("../docs/design.md"), -1)
	if len(design) != 1 || !slices.Equal(names(design[0]), want) {
		t.Errorf("docs/design.md lists the stages as %q, the code declares %q", design, want)
	}

	// timings.md: the first column of the stage table (the rows up to the
	// first blank line after its "| stage |" header).
	timings := read("../docs/timings.md")
	start := strings.Index(timings, "| stage |")
	if start < 0 {
		t.Fatal(`docs/timings.md has no "| stage |" table`)
	}
	table, _, _ := strings.Cut(timings[start:], "\n\n")
	var rows []string
	for _, row := range strings.Split(table, "\n")[2:] {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " |")
		rows = append(rows, names(first)...)
	}
	if !slices.Equal(rows, want) {
		t.Errorf("docs/timings.md's stage table lists %q, the code declares %q", rows, want)
	}

	// metrics.md: the stage histogram's row.
	_, row, _ := strings.Cut(read("../docs/metrics.md"), "each stage's duration: ")
	row, _, _ = strings.Cut(row, " |")
	if got := strings.Split(row, ", "); !slices.Equal(got, want) {
		t.Errorf("docs/metrics.md lists the stages as %q, the code declares %q", got, want)
	}

	// The column comment, as a migrated database holds it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, postgrestest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var comment string
	if err := conn.QueryRow(ctx, `SELECT col_description('query_stages'::regclass,
		(SELECT attnum FROM pg_attribute WHERE attrelid = 'query_stages'::regclass AND attname = 'name'))`).Scan(&comment); err != nil {
		t.Fatal(err)
	}
	_, list, _ := strings.Cut(comment, "(")
	list, _, _ = strings.Cut(list, ")")
	if got := strings.Split(list, ", "); !slices.Equal(got, want) {
		t.Errorf("query_stages.name's comment lists %q (%q), the code declares %q", got, comment, want)
	}
}
