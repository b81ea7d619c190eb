package retrieval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"ragtime"
	"ragtime/pipeline"
)

// copyCorpus copies testdata/corpus into a fresh folder the test may change.
func copyCorpus(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "corpus")
	if err := os.CopyFS(dst, os.DirFS("testdata/corpus")); err != nil {
		t.Fatal(err)
	}
	return dst
}

// countingEmbedder wraps an embedder and records the batch sizes it sees.
type countingEmbedder struct {
	pipeline.Embedder
	mu      sync.Mutex
	batches []int
}

func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	c.mu.Lock()
	c.batches = append(c.batches, len(texts))
	c.mu.Unlock()
	return c.Embedder.Embed(ctx, texts)
}

func newIngester(t *testing.T, dataDir string) (*Ingester, *countingEmbedder) {
	t.Helper()
	e := &countingEmbedder{Embedder: newEmbedder(t, 256)}
	ix, err := OpenIndex(dataDir, IndexOptions{Dimension: 256, Embedder: HashEmbedderName, Writable: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	return &Ingester{Embedder: e, Store: ix, ChunkSize: 200, ChunkOverlap: 20, BatchSize: 4}, e
}

// docText returns a document's chunks in order.
func docText(t *testing.T, ix *Index, docID string) []pipeline.Chunk {
	t.Helper()
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	e, ok := ix.st.docs[docID]
	if !ok {
		t.Fatalf("document %q not stored", docID)
	}
	var out []pipeline.Chunk
	for _, s := range e.slots {
		out = append(out, ix.st.chunks[s])
	}
	return out
}

func joined(chunks []pipeline.Chunk) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString(c.Text)
		b.WriteString("\n")
	}
	return b.String()
}

func TestIngestCorpus(t *testing.T) {
	t.Parallel()
	corpus := copyCorpus(t)
	in, emb := newIngester(t, t.TempDir())
	in.SaveEvery = 2
	var progress []Progress
	stats, err := in.Ingest(context.Background(), []string{corpus}, func(p Progress) { progress = append(progress, p) })
	if err != nil {
		t.Fatal(err)
	}
	want := []ragtime.DocumentInfo{
		{DocID: "guide.md", Title: "Getting started with prefill"},
		{DocID: "notes.txt", Title: "notes.txt"},
		{DocID: "page.html", Title: "Vector search notes"},
		{DocID: "sub/deep.markdown", Title: "Chunking strategies"},
		{DocID: "untitled.md", Title: "untitled.md"},
	}
	got := in.Store.(*Index).Documents()
	if len(got) != len(want) {
		t.Fatalf("documents = %+v, want %d", got, len(want))
	}
	total := 0
	for i := range want {
		if got[i].DocID != want[i].DocID || got[i].Title != want[i].Title || got[i].Chunks == 0 || len(got[i].ContentHash) != 64 {
			t.Errorf("document %d = %+v, want id %q title %q", i, got[i], want[i].DocID, want[i].Title)
		}
		total += got[i].Chunks
	}
	if stats.Documents != 5 || stats.Skipped != 0 || stats.Chunks != total || in.Store.(*Index).Len() != total {
		t.Errorf("stats %+v, Len %d, chunks listed %d", stats, in.Store.(*Index).Len(), total)
	}
	if n := len(progress); n != 6 || !progress[n-1].Done || progress[n-1].Files != 5 || progress[n-1].TotalFiles != 5 {
		t.Errorf("progress reports: %+v", progress)
	}
	// Batches run across files: none above BatchSize, all chunks embedded once.
	sum := 0
	for _, b := range emb.batches {
		if b > in.BatchSize {
			t.Errorf("embedding batch of %d > %d", b, in.BatchSize)
		}
		sum += b
	}
	if sum != total {
		t.Errorf("embedded %d texts for %d chunks", sum, total)
	}

	guide := docText(t, in.Store.(*Index), "guide.md")
	for i, c := range guide {
		if c.ID != ChunkID("guide.md", i) || c.Index != i || c.Metadata["type"] != pipeline.KindMarkdown || c.Title != "Getting started with prefill" {
			t.Errorf("guide chunk %d = %+v", i, c)
		}
		if n := utf8.RuneCountInString(c.Text); n > in.ChunkSize {
			t.Errorf("guide chunk %d has %d characters > %d", i, n, in.ChunkSize)
		}
	}
	if len(guide) < 3 {
		t.Errorf("guide split in %d chunks, want several at size %d", len(guide), in.ChunkSize)
	}
	if !slices.ContainsFunc(guide, func(c pipeline.Chunk) bool { return strings.HasPrefix(c.Text, "## Prefix caching") }) {
		t.Errorf("no chunk starts at the heading \"## Prefix caching\":\n%s", joined(guide))
	}

	page := joined(docText(t, in.Store.(*Index), "page.html"))
	for _, bad := range []string{"tracking code", "injected text", "color: red", "template text", "enable JavaScript", "<p>", "Vector search"} {
		if strings.Contains(page, bad) {
			t.Errorf("HTML text contains %q:\n%s", bad, page)
		}
	}
	for _, good := range []string{"every stored vector.\n\nA bounded heap", "Tom & Jerry\u00a0say hi.", "Exact search"} {
		if !strings.Contains(page, good) {
			t.Errorf("HTML text lacks %q:\n%s", good, page)
		}
	}

	// The whole corpus is findable, and hidden or unsupported files are not there.
	q, _ := in.Embedder.Embed(context.Background(), []string{"how does recursive character splitting choose breaks"})
	hits, err := in.Store.(*Index).Search(context.Background(), q[0], 1, pipeline.Filter{})
	if err != nil || len(hits) != 1 || hits[0].DocID != "sub/deep.markdown" {
		t.Errorf("search for chunking found %+v (err %v)", hits, err)
	}
	if _, ok := in.Store.(*Index).DocumentHash(".hidden/secret.md"); ok {
		t.Error("a file in a hidden folder was ingested")
	}
}

func TestReingest(t *testing.T) {
	t.Parallel()
	corpus := copyCorpus(t)
	dataDir := t.TempDir()
	in, _ := newIngester(t, dataDir)
	ctx := context.Background()
	first, err := in.Ingest(ctx, []string{corpus}, nil)
	if err != nil {
		t.Fatal(err)
	}

	again, err := in.Ingest(ctx, []string{corpus}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Documents != 0 || again.Skipped != 5 || again.Chunks != 0 || in.Store.(*Index).Len() != first.Chunks {
		t.Errorf("unchanged re-ingest: %+v, Len %d (first run %d chunks)", again, in.Store.(*Index).Len(), first.Chunks)
	}

	guide := filepath.Join(corpus, "guide.md")
	if err := os.WriteFile(guide, []byte("# Rewritten\n\nDecoding is memory-bound.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	oldGuide := len(docText(t, in.Store.(*Index), "guide.md"))
	changed, err := in.Ingest(ctx, []string{corpus}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Documents != 1 || changed.Skipped != 4 || changed.Chunks != 1 {
		t.Errorf("changed re-ingest: %+v", changed)
	}
	chunks := docText(t, in.Store.(*Index), "guide.md")
	if len(chunks) != 1 || chunks[0].Title != "Rewritten" || strings.Contains(joined(chunks), "prefill") {
		t.Errorf("changed guide: %+v", chunks)
	}
	if want := first.Chunks - oldGuide + 1; in.Store.(*Index).Len() != want {
		t.Errorf("Len = %d, want %d (old chunks replaced, not duplicated)", in.Store.(*Index).Len(), want)
	}

	// What was ingested is on disk: a fresh writer in a later run sees it
	// and skips everything.
	in.Store.(*Index).Close()
	in2, _ := newIngester(t, dataDir)
	if in2.Store.(*Index).Len() != in.Store.(*Index).Len() {
		t.Fatalf("reopened index has %d chunks, want %d", in2.Store.(*Index).Len(), in.Store.(*Index).Len())
	}
	third, err := in2.Ingest(ctx, []string{corpus}, nil)
	if err != nil || third.Skipped != 5 {
		t.Errorf("after reopening: %+v, %v", third, err)
	}
}

func TestChunkingIsStable(t *testing.T) {
	t.Parallel()
	corpus := copyCorpus(t)
	counts := func() []ragtime.DocumentInfo {
		in, _ := newIngester(t, t.TempDir())
		in.BatchSize = 3
		if _, err := in.Ingest(context.Background(), []string{corpus}, nil); err != nil {
			t.Fatal(err)
		}
		return in.Store.(*Index).Documents()
	}
	a, b := counts(), counts()
	if !slices.Equal(a, b) {
		t.Errorf("two runs chunked differently:\n%+v\n%+v", a, b)
	}
}

func TestIngestArguments(t *testing.T) {
	t.Parallel()
	corpus := copyCorpus(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		args    []string
		wantIDs []string
		wantErr string
	}{
		{"single file", []string{filepath.Join(corpus, "sub", "deep.markdown")}, []string{"deep.markdown"}, ""},
		{"sub folder", []string{filepath.Join(corpus, "sub")}, []string{"deep.markdown"}, ""},
		{"file and folder", []string{filepath.Join(corpus, "notes.txt"), filepath.Join(corpus, "sub")}, []string{"deep.markdown", "notes.txt"}, ""},
		{"colliding ids", []string{filepath.Join(corpus, "sub"), filepath.Join(corpus, "sub", "deep.markdown")}, nil, "deep.markdown"},
		{"missing path", []string{filepath.Join(corpus, "nope")}, nil, "nope"},
		{"unsupported file", []string{filepath.Join(corpus, "data.json")}, nil, "data.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, _ := newIngester(t, t.TempDir())
			_, err := in.Ingest(ctx, tt.args, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, d := range in.Store.(*Index).Documents() {
				ids = append(ids, d.DocID)
			}
			if !slices.Equal(ids, tt.wantIDs) {
				t.Errorf("doc ids %v, want %v", ids, tt.wantIDs)
			}
		})
	}
}

func TestIngestValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		size, overlap, batch int
		wantFlag             string
	}{
		{"overlap equals size", 100, 100, 1, "--chunk-overlap"},
		{"overlap above default size", 0, 1000, 1, "--chunk-overlap"},
		{"negative overlap", 100, -1, 1, "--chunk-overlap"},
		{"negative size", -5, 0, 1, "--chunk-size"},
		{"negative batch", 100, 10, -1, "--batch-size"},
	}
	for _, tt := range tests {
		in, _ := newIngester(t, t.TempDir())
		in.ChunkSize, in.ChunkOverlap, in.BatchSize = tt.size, tt.overlap, tt.batch
		_, err := in.Ingest(context.Background(), []string{"testdata/corpus"}, nil)
		if err == nil || !strings.Contains(err.Error(), tt.wantFlag) {
			t.Errorf("%s: err = %v, want one naming %s", tt.name, err, tt.wantFlag)
		}
		if in.Store.(*Index).Len() != 0 {
			t.Errorf("%s: ingested despite invalid settings", tt.name)
		}
	}
}

// badFolder writes a folder holding one good Markdown file, an HTML file
// nested 300,000 elements deep (beyond the parser's limit) and a binary
// file named .md (every byte value, repeated), and returns it.
func badFolder(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := make([]byte, 0, 256*600)
	for range 600 {
		for b := range 256 {
			bin = append(bin, byte(b))
		}
	}
	for name, content := range map[string][]byte{
		"good.md":   []byte("# Good\n\nPrefill and decode are the two phases of generation."),
		"deep.html": []byte(strings.Repeat("<div>", 300_000) + "deep" + strings.Repeat("</div>", 300_000)),
		"blob.md":   bin,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBadFilesAreSkippedAndListed: one file the parser refuses and one that
// is not text leave the rest of the folder to be ingested; both are listed
// with their reasons, and neither is stored.
func TestBadFilesAreSkippedAndListed(t *testing.T) {
	t.Parallel()
	src := badFolder(t)
	in, _ := newIngester(t, filepath.Join(t.TempDir(), "data"))
	stats, err := in.Ingest(context.Background(), []string{src}, nil)
	if err != nil {
		t.Fatalf("ingest stopped: %v", err)
	}
	if stats.Documents != 1 {
		t.Errorf("stats %+v, want the good file stored", stats)
	}
	ix := in.Store.(*Index)
	if _, ok := ix.DocumentHash("good.md"); !ok {
		t.Error("good.md was not stored")
	}
	for _, id := range []string{"deep.html", "blob.md"} {
		if _, ok := ix.DocumentHash(id); ok {
			t.Errorf("%s was stored", id)
		}
	}
	if len(stats.Failed) != 2 {
		t.Fatalf("failed %v, want deep.html and blob.md", stats.Failed)
	}
	want := map[string]string{"blob.md": "is not text: it holds a NUL byte", "deep.html": "deeper than 512 levels"}
	for _, f := range stats.Failed {
		reason, ok := want[filepath.Base(f.Path)]
		if !ok || !strings.Contains(f.Error(), reason) || !strings.Contains(f.Error(), filepath.Base(f.Path)) {
			t.Errorf("failure %s: %v, want one naming it and saying %q", f.Path, f, reason)
		}
		var ve *pipeline.ValidationError
		if !errors.As(f, &ve) {
			t.Errorf("failure %s: %T, want a *pipeline.ValidationError inside", f.Path, f.Err)
		}
	}
}

func TestUnreadableFileIsSkippedAndWorkKept(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a.md"), []byte("# A\n\nfirst document"), 0o644); err != nil {
		t.Fatal(err)
	}
	// /proc/self/mem stats as a regular file but reading it at offset 0
	// fails: an unreadable file even for root.
	if err := os.Symlink("/proc/self/mem", filepath.Join(src, "b.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "c.md"), []byte("# C\n\nthird document"), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	in, _ := newIngester(t, dataDir)
	in.BatchSize = 1
	stats, err := in.Ingest(context.Background(), []string{src}, nil)
	if err != nil {
		t.Fatalf("ingest stopped: %v", err)
	}
	if len(stats.Failed) != 1 || !strings.Contains(stats.Failed[0].Error(), "b.txt") {
		t.Fatalf("failed %v, want b.txt listed", stats.Failed)
	}
	if stats.Documents != 2 {
		t.Errorf("stats %+v, want the files around it stored", stats)
	}
	rd, err := OpenIndex(dataDir, IndexOptions{Dimension: 256, Embedder: HashEmbedderName})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a.md", "c.md"} {
		if _, ok := rd.DocumentHash(id); !ok {
			t.Errorf("%s was not saved", id)
		}
	}
}

// TestNotText: what extract refuses as not text, and what it keeps.
func TestNotText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		content string
		refused string
	}{
		{"plain", "Prefill, then decode.\n\tindented\r\n\f", ""},
		{"Latin-1 accents", "caf\xe9 au lait, cr\xe8me br\xfbl\xe9e, na\xefve fa\xe7ade\n", ""},
		{"ANSI colours", "\x1b[31merror\x1b[0m: nothing listens\n", ""},
		{"empty", "", ""},
		{"NUL", "text\x00more", "NUL byte (at offset 4)"},
		{"UTF-16", "\xff\xfeh\x00i\x00", "NUL byte"},
		{"mostly invalid UTF-8", "\xc1\xd0\xe3\xf2\xfa ab", "not valid UTF-8"},
		{"control characters", strings.Repeat("word ", 20) + "\x01\x02", "control characters"},
		{"C1 controls", strings.Repeat("word ", 20) + "\u0085\u0090", "control characters"},
	} {
		_, err := extract(pipeline.KindMarkdown, "doc.md", []byte(tc.content))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "doc.md is not text")):
			t.Errorf("%s: err %v, want one saying doc.md is not text: %s", tc.name, err, tc.refused)
		}
	}
}

func TestIngestRepairsInvalidUTF8(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "latin1.txt"), []byte("caf\xe9 au lait\xff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.md"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	in, _ := newIngester(t, filepath.Join(dir, "data"))
	stats, err := in.Ingest(context.Background(), []string{dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Documents != 2 {
		t.Errorf("stats %+v", stats)
	}
	text := joined(docText(t, in.Store.(*Index), "latin1.txt"))
	if !utf8.ValidString(text) || !strings.Contains(text, "caf\uFFFD au lait\uFFFD") {
		t.Errorf("text %q, want invalid bytes replaced by U+FFFD", text)
	}
	if n := len(docText(t, in.Store.(*Index), "empty.md")); n != 0 {
		t.Errorf("empty file has %d chunks", n)
	}
	// An empty file is recorded, so it is skipped next time.
	again, _ := in.Ingest(context.Background(), []string{dir}, nil)
	if again.Skipped != 2 {
		t.Errorf("second run %+v, want both skipped", again)
	}
}

func TestIngestCancelled(t *testing.T) {
	t.Parallel()
	in, _ := newIngester(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := in.Ingest(ctx, []string{"testdata/corpus"}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	feed := func(report func(Progress)) {
		for i := 1; i <= 20; i++ {
			report(Progress{Files: i, TotalFiles: 20, Documents: i, Chunks: 3 * i})
		}
		report(Progress{Files: 20, TotalFiles: 20, Documents: 18, Skipped: 2, Chunks: 60, Done: true})
	}
	var plain bytes.Buffer
	feed(ProgressBar(&plain, false))
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) != 11 { // files 1, 2, 4, … 18, then the summary
		t.Errorf("plain progress printed %d lines, want 11 (every tenth and the end):\n%s", len(lines), plain.String())
	}
	if lines[0] != "read 1/20 files, 3 chunks stored so far" || lines[len(lines)-1] != "ingested 20/20 files: 18 stored, 2 unchanged, 60 chunks" {
		t.Errorf("plain progress:\n%s", plain.String())
	}
	var term bytes.Buffer
	feed(ProgressBar(&term, true))
	if !strings.Contains(term.String(), "20/20") || !strings.Contains(term.String(), "18 stored") {
		t.Errorf("terminal progress:\n%q", term.String())
	}
}

func TestMarkdownTitle(t *testing.T) {
	t.Parallel()
	tests := []struct{ src, want string }{
		{"# Hello\n\ntext", "Hello"},
		{"intro\n\n## Sub\n\n# Main #\n", "Main"},
		{"```\n# in code\n```\n# Real", "Real"},
		{"Setext\n======\n", "Setext"},
		{"---\ntitle: \"From front matter\"\n---\n# Heading", "From front matter"},
		{"#NoSpace\nplain", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := markdownTitle(tt.src); got != tt.want {
			t.Errorf("markdownTitle(%q) = %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestHTMLText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src, title, text string
	}{
		{"blocks do not glue", `<p>One.</p><p>Two.</p><div>Three<div>Four</div></div>`,
			"", "One.\n\nTwo.\n\nThree\nFour"},
		{"title and h1", `<html><head><title> The
 Title </title><script>x()</script></head><body><h1>Head</h1>text</body></html>`,
			"The Title", "Head\n\ntext"},
		{"h1 when no title", `<h1>Only <em>heading</em></h1><p>body</p>`, "Only heading", "Only heading\n\nbody"},
		{"hidden content", `<style>a{}</style><noscript>no</noscript><template>tpl</template><script>js</script><p>kept</p>`,
			"", "kept"},
		{"lists and breaks", `<ul><li>a</li><li>b</li></ul>line<br>break`, "", "a\nb\n\nline\nbreak"},
		{"table cells", `<table><tr><td>x</td><td>y</td></tr><tr><td>z</td></tr></table>`, "", "x y\nz"},
		{"pre keeps lines", "<pre>l1\nl2</pre>", "", "l1\nl2"},
		{"entities and spaces", "<p>a &amp;   b\n c</p>", "", "a & b c"},
		{"broken markup", "<p>unclosed <b>bold <i>both</p> after", "", "unclosed bold both\n\nafter"},
	}
	for _, tt := range tests {
		title, text, err := htmlText(tt.src)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if title != tt.title || text != tt.text {
			t.Errorf("%s:\n title %q text %q\nwant title %q text %q", tt.name, title, text, tt.title, tt.text)
		}
	}
}

func TestLongLinesSplitAtSentences(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var line strings.Builder
	for i := range 30 {
		fmt.Fprintf(&line, "Sentence number %d talks about prefill and decode. ", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "long.txt"), []byte(line.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	in, _ := newIngester(t, filepath.Join(dir, "data"))
	if _, err := in.Ingest(context.Background(), []string{dir}, nil); err != nil {
		t.Fatal(err)
	}
	chunks := docText(t, in.Store.(*Index), "long.txt")
	if len(chunks) < 5 {
		t.Fatalf("%d chunks, want the line split", len(chunks))
	}
	for i, c := range chunks {
		if !strings.HasPrefix(c.Text, "Sentence number ") || utf8.RuneCountInString(c.Text) > in.ChunkSize {
			t.Errorf("chunk %d = %q, want it to start at a sentence and fit %d characters", i, c.Text, in.ChunkSize)
		}
	}
}

// TestIngestConcurrencyStoresTheSame checks that embedding batches in
// parallel stores exactly what a sequential run stores, in file order.
func TestIngestConcurrencyStoresTheSame(t *testing.T) {
	t.Parallel()
	corpus := copyCorpus(t)
	seq, _ := newIngester(t, t.TempDir())
	if _, err := seq.Ingest(context.Background(), []string{corpus}, nil); err != nil {
		t.Fatal(err)
	}
	par, emb := newIngester(t, t.TempDir())
	par.Concurrency = 3
	st, err := par.Ingest(context.Background(), []string{corpus}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.batches) < 2 {
		t.Fatalf("batches %v: want several", emb.batches)
	}
	for _, b := range emb.batches {
		if b > par.BatchSize {
			t.Errorf("batch of %d texts exceeds BatchSize %d", b, par.BatchSize)
		}
	}
	a, b := seq.Store.(*Index), par.Store.(*Index)
	if !slices.Equal(a.Documents(), b.Documents()) || st.Chunks != a.Len() {
		t.Fatalf("concurrent ingest stored %v (%d chunks), sequential %v", b.Documents(), st.Chunks, a.Documents())
	}
	for _, d := range a.Documents() {
		if !slices.EqualFunc(docText(t, a, d.DocID), docText(t, b, d.DocID), func(x, y pipeline.Chunk) bool { return x.Text == y.Text }) {
			t.Errorf("%s differs between sequential and concurrent ingest", d.DocID)
		}
	}
	if _, err := (&Ingester{Embedder: emb, Store: b, Concurrency: -1}).Ingest(context.Background(), []string{corpus}, nil); err == nil || !strings.Contains(err.Error(), "--concurrency") {
		t.Errorf("negative concurrency: %v", err)
	}
}

// TestIngestContentTitleFallsBackToTheID: content without a title of its
// own (no title given, no heading) is titled after its id, as a file is
// after its name, not after its Source ("api").
func TestIngestContentTitleFallsBackToTheID(t *testing.T) {
	t.Parallel()
	in, _ := newIngester(t, t.TempDir())
	for _, c := range []struct {
		id, kind, body, want string
	}{
		{"notes.txt", pipeline.KindText, "Batching raises throughput.", "notes.txt"},
		{"guides/setup.md", pipeline.KindMarkdown, "No heading here.", "setup.md"},
		{"page.html", pipeline.KindHTML, "<html><body><p>No title element.</p></body></html>", "page.html"},
		{"kv.md", pipeline.KindMarkdown, "# KV cache\n\nKeys and values.", "KV cache"},
	} {
		res, err := in.IngestContent(context.Background(), pipeline.DocumentInput{DocID: c.id, Kind: c.kind, Body: []byte(c.body), Source: "api"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Title != c.want {
			t.Errorf("%s: title %q, want %q", c.id, res.Title, c.want)
		}
	}
}

func TestProgressAfter(t *testing.T) {
	t.Parallel()
	clock := time.Unix(0, 0)
	now := func() time.Time { return clock }
	var got []Progress
	report := ProgressAfter(func(p Progress) { got = append(got, p) }, time.Second, now)
	report(Progress{Files: 1, TotalFiles: 4})
	clock = clock.Add(999 * time.Millisecond)
	report(Progress{Files: 2, TotalFiles: 4})
	if len(got) != 0 {
		t.Fatalf("progress shown before a second passed: %+v", got)
	}
	clock = clock.Add(time.Millisecond)
	report(Progress{Files: 3, TotalFiles: 4})
	report(Progress{Files: 4, TotalFiles: 4, Done: true})
	if len(got) != 2 || got[0].Files != 3 || !got[1].Done {
		t.Errorf("after a second: %+v, want files 3 and the end", got)
	}

	// A quick run shows nothing, not even its end.
	var quick []Progress
	fast := ProgressAfter(func(p Progress) { quick = append(quick, p) }, time.Second, func() time.Time { return time.Unix(0, 0) })
	fast(Progress{Files: 1, TotalFiles: 1})
	fast(Progress{Files: 1, TotalFiles: 1, Done: true})
	if len(quick) != 0 {
		t.Errorf("a quick ingest showed %+v", quick)
	}
}

// TestIngestWorkersWriteTheSameIndex: 1, 3 and 8 workers write
// byte-identical index files (log, and after a compaction snapshot and
// graph) from a corpus large enough for the HNSW graph, with a file left
// out and an unchanged one skipped on the way, and list the same failures.
func TestIngestWorkersWriteTheSameIndex(t *testing.T) {
	t.Parallel()
	corpus := t.TempDir()
	words := strings.Fields("index graph vector chunk query token stream cache prefill decode latency replica " +
		"postgres redis shard tenant compaction snapshot log record embedding lexical stem analyser worker order")
	seed := uint64(1)
	next := func() int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int(seed >> 33)
	}
	for f := range 90 {
		var b strings.Builder
		fmt.Fprintf(&b, "# Page %d\n\n", f)
		for range 60 + next()%200 {
			b.WriteString(words[next()%len(words)])
			if next()%9 == 0 {
				b.WriteString(". ")
			} else {
				b.WriteByte(' ')
			}
		}
		if err := os.WriteFile(filepath.Join(corpus, fmt.Sprintf("page%02d.md", f)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(corpus, "binary.txt"), []byte("\x00\x01\x02 not text"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := func(workers int) map[string][]byte {
		dir := t.TempDir()
		in, _ := newIngester(t, dir)
		in.ChunkSize, in.ChunkOverlap, in.Workers = 60, 10, workers
		ix := in.Store.(*Index)
		// One file first, so the full run skips it as unchanged.
		if _, err := in.Ingest(context.Background(), []string{filepath.Join(corpus, "page07.md")}, nil); err != nil {
			t.Fatal(err)
		}
		st, err := in.Ingest(context.Background(), []string{corpus}, nil)
		if err != nil || len(st.Failed) != 1 || st.Skipped != 1 || !strings.Contains(fmt.Sprint(st.Failed), "binary.txt") {
			t.Fatalf("%d workers: %+v, %v; want page07.md skipped and binary.txt left out", workers, st, err)
		}
		if st.Documents != 89 || ix.Len() < 1100 {
			t.Fatalf("%d workers stored %d documents, %d chunks; want 89 and enough chunks for the graph", workers, st.Documents, ix.Len())
		}
		out := map[string][]byte{}
		read := func(when string) {
			ents, err := os.ReadDir(filepath.Join(dir, indexDirName))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if b, err := os.ReadFile(filepath.Join(dir, indexDirName, e.Name())); err == nil {
					out[when+"/"+e.Name()] = b
				}
			}
		}
		read("logged")
		if _, err := ix.Compact(context.Background()); err != nil {
			t.Fatal(err)
		}
		read("compacted")
		return out
	}
	one := files(1)
	if one["compacted/"+graphFileName] == nil || one["logged/"+logFileName] == nil {
		t.Fatalf("wrote %v: want the log, then a snapshot and its graph", slices.Sorted(maps.Keys(one)))
	}
	for _, w := range []int{3, 8} {
		got := files(w)
		if len(got) != len(one) {
			t.Errorf("%d workers wrote files %v, 1 worker %v", w, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(one)))
		}
		for name, b := range one {
			if !bytes.Equal(got[name], b) {
				t.Errorf("%s differs between 1 and %d workers (%d and %d bytes)", name, w, len(b), len(got[name]))
			}
		}
	}
}

// TestIngestContentsStoresOneBatch: a batch of contents is stored in one
// call, in order, an unchanged document left alone; a store that fails
// stores nothing of the batch it refuses and the error says which batch.
func TestIngestContentsStoresOneBatch(t *testing.T) {
	t.Parallel()
	in, _ := newIngester(t, t.TempDir())
	ix := in.Store.(*Index)
	batch := []pipeline.DocumentInput{
		{DocID: "a.md", Kind: pipeline.KindMarkdown, Body: []byte("# A\n\nPrefill is measured.")},
		{DocID: "b.md", Kind: pipeline.KindMarkdown, Body: []byte("# B\n\nDecode emits tokens.")},
	}
	if _, err := in.IngestContents(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	batch = append(batch, pipeline.DocumentInput{DocID: "c.md", Kind: pipeline.KindMarkdown, Body: []byte("# C\n\nThe queue waits.")})
	batch[1].Body = []byte("# B\n\nDecode emits one token at a time.")
	res, err := in.IngestContents(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Unchanged || res[1].Unchanged || res[2].Title != "C" || ix.Len() != 3 {
		t.Errorf("results %+v, %d chunks; want a unchanged, b replaced, c added (3 chunks)", res, ix.Len())
	}
	ix.Close()
	batch[0].Body = []byte("# A\n\nChanged.")
	if _, err := in.IngestContents(context.Background(), batch); err == nil ||
		!strings.Contains(err.Error(), "storing a batch of 1 documents from a.md") || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a closed store: err = %v, want the batch and the reason named", err)
	}
}
