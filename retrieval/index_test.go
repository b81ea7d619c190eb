package retrieval

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"ragtime"
	"ragtime/pipeline"
)

func openIndex(t testing.TB, dir string, dim int, writable bool) *Index {
	t.Helper()
	return openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: writable})
}

// openExact opens an index without the HNSW graph: every search is exact.
func openExact(t testing.TB, dir string, dim int, writable bool) *Index {
	t.Helper()
	return openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: writable, Exact: true})
}

func openIndexOpts(t testing.TB, dir string, opts IndexOptions) *Index {
	t.Helper()
	ix, err := OpenIndex(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	return ix
}

func randomVector(r *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// fillRandom stores n chunks in documents of 1 to 5 chunks; chunk metadata
// "parity" is the document number's parity. It returns every chunk's id and
// raw vector.
func fillRandom(t testing.TB, ix *Index, r *rand.Rand, n, dim int) map[string][]float32 {
	t.Helper()
	all := make(map[string][]float32, n)
	for d := 0; len(all) < n; d++ {
		doc := Document{DocID: fmt.Sprintf("doc%d", d), Title: fmt.Sprintf("Doc %d", d), ContentHash: "h"}
		for i := range min(1+r.IntN(5), n-len(all)) {
			v := randomVector(r, dim)
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{
				Text:     fmt.Sprintf("chunk %d of doc %d", i, d),
				Metadata: map[string]string{"parity": fmt.Sprint(d % 2)},
			})
			doc.Vectors = append(doc.Vectors, v)
			all[ChunkID(doc.DocID, i)] = v
		}
		if err := ix.ReplaceDocument(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

type refHit struct {
	id    string
	score float64
}

// bruteForce is the reference: float64 cosine against every vector kept.
func bruteForce(all map[string][]float32, q []float32, k int, keep func(id string) bool) []refHit {
	var out []refHit
	for id, v := range all {
		if keep != nil && !keep(id) {
			continue
		}
		out = append(out, refHit{id, cosine(q, v)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].score > out[j].score })
	return out[:min(k, len(out))]
}

func checkAgainst(t *testing.T, got []pipeline.Hit, want []refHit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d hits, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].id || math.Abs(got[i].Score-want[i].score) > 1e-5 {
			t.Fatalf("hit %d = %s %.6f, want %s %.6f", i, got[i].ID, got[i].Score, want[i].id, want[i].score)
		}
	}
}

// TestSearchMatchesBruteForce is not parallel: it sets parallelMin, which
// every search reads.
func TestSearchMatchesBruteForce(t *testing.T) {
	tests := []struct {
		name        string
		n, dim, k   int
		parallelMin int
	}{
		{"tiny", 3, 8, 10, 1 << 30},
		{"k=1", 500, 16, 1, 1 << 30},
		{"sequential", 2000, 64, 10, 1 << 30},
		{"odd dimension", 1000, 37, 25, 1 << 30},
		{"parallel", 3000, 32, 50, 256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := parallelMin
			parallelMin = tt.parallelMin
			t.Cleanup(func() { parallelMin = old })
			r := rand.New(rand.NewPCG(uint64(tt.n), uint64(tt.dim)))
			ix := openExact(t, t.TempDir(), tt.dim, true)
			all := fillRandom(t, ix, r, tt.n, tt.dim)
			if ix.Len() != tt.n {
				t.Fatalf("Len = %d, want %d", ix.Len(), tt.n)
			}
			for range 5 {
				q := randomVector(r, tt.dim)
				got, err := ix.Search(context.Background(), q, tt.k, pipeline.Filter{})
				if err != nil {
					t.Fatal(err)
				}
				checkAgainst(t, got, bruteForce(all, q, tt.k, nil))
			}
		})
	}
}

func TestSearchFilters(t *testing.T) {
	t.Parallel()
	const dim = 16
	r := rand.New(rand.NewPCG(7, 7))
	ix := openIndex(t, t.TempDir(), dim, true)
	all := fillRandom(t, ix, r, 300, dim)
	docOf := func(id string) string { return id[:strings.IndexByte(id, '#')] }
	parity := func(id string) string {
		var d int
		fmt.Sscanf(docOf(id), "doc%d", &d)
		return fmt.Sprint(d % 2)
	}
	tests := []struct {
		name   string
		filter pipeline.Filter
		keep   func(id string) bool
	}{
		{"doc ids", pipeline.Filter{DocIDs: []string{"doc3", "doc10", "doc10", "nope"}},
			func(id string) bool { return docOf(id) == "doc3" || docOf(id) == "doc10" }},
		{"metadata", pipeline.Filter{Metadata: map[string]string{"parity": "1"}},
			func(id string) bool { return parity(id) == "1" }},
		{"both", pipeline.Filter{DocIDs: []string{"doc3", "doc4"}, Metadata: map[string]string{"parity": "0"}},
			func(id string) bool { return docOf(id) == "doc4" }},
		{"unknown metadata key", pipeline.Filter{Metadata: map[string]string{"lang": "en"}},
			func(string) bool { return false }},
		{"unknown doc", pipeline.Filter{DocIDs: []string{"nope"}},
			func(string) bool { return false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := randomVector(r, dim)
			got, err := ix.Search(context.Background(), q, 20, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainst(t, got, bruteForce(all, q, 20, tt.keep))
		})
	}
}

// TestSearchHitsShareMetadata: a hit's Metadata is the index's own map
// (pipeline.Searcher's contract), not a copy made per hit and per search,
// while the map a caller ingested stays the caller's.
func TestSearchHitsShareMetadata(t *testing.T) {
	t.Parallel()
	const dim = 8
	ix := openIndex(t, t.TempDir(), dim, true)
	mine := map[string]string{"team": "search"}
	v := randomVector(rand.New(rand.NewPCG(1, 1)), dim)
	doc := Document{DocID: "d", Title: "D", ContentHash: "h", Chunks: []pipeline.Chunk{{Text: "t", Metadata: mine}}, Vectors: [][]float32{v}}
	if err := ix.ReplaceDocument(context.Background(), doc); err != nil {
		t.Fatal(err)
	}
	mine["team"] = "changed after ingest"
	var maps []map[string]string
	for range 2 {
		hits, err := ix.Search(context.Background(), v, 1, pipeline.Filter{})
		if err != nil || len(hits) != 1 {
			t.Fatalf("search: %v, %d hits", err, len(hits))
		}
		maps = append(maps, hits[0].Metadata)
	}
	if got := maps[0]["team"]; got != "search" {
		t.Errorf("hit metadata team = %q, want the ingested %q", got, "search")
	}
	if reflect.ValueOf(maps[0]).Pointer() != reflect.ValueOf(maps[1]).Pointer() {
		t.Error("two searches returned two copies of one chunk's metadata")
	}
}

func TestSearchEdgeCases(t *testing.T) {
	t.Parallel()
	ix := openIndex(t, t.TempDir(), 4, true)
	ctx := context.Background()
	if hits, err := ix.Search(ctx, []float32{1, 0, 0, 0}, 5, pipeline.Filter{}); err != nil || len(hits) != 0 {
		t.Fatalf("empty index: %v, %v", hits, err)
	}
	err := ix.ReplaceDocument(ctx, Document{DocID: "a", Title: "A", Chunks: []pipeline.Chunk{{Text: "x"}, {Text: "y"}},
		Vectors: [][]float32{{3, 0, 0, 0}, {0, 0, 0, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		q        []float32
		k        int
		wantHits int
		wantErr  error
	}{
		{"k larger than the index", []float32{2, 0, 0, 0}, 10, 2, nil},
		{"k zero", []float32{1, 0, 0, 0}, 0, 0, nil},
		{"k enormous", []float32{1, 0, 0, 0}, math.MaxInt, 2, nil},
		{"zero query", []float32{0, 0, 0, 0}, 3, 0, nil},
		{"wrong dimension", []float32{1, 0}, 3, 0, ErrDimension},
	}
	for _, tt := range tests {
		hits, err := ix.Search(ctx, tt.q, tt.k, pipeline.Filter{})
		if !errors.Is(err, tt.wantErr) || len(hits) != tt.wantHits {
			t.Errorf("%s: %d hits, err %v; want %d hits, err %v", tt.name, len(hits), err, tt.wantHits, tt.wantErr)
		}
	}
	hits, _ := ix.Search(ctx, []float32{2, 0, 0, 0}, 1, pipeline.Filter{})
	if len(hits) != 1 || hits[0].ID != "a#0" || math.Abs(hits[0].Score-1) > 1e-6 || hits[0].Title != "A" || hits[0].DocID != "a" {
		t.Errorf("stored vectors not normalised or chunk fields not set: %+v", hits)
	}
	bad := []Document{
		{DocID: "", Chunks: nil},
		{DocID: "b", Chunks: []pipeline.Chunk{{Text: "x"}}},
		{DocID: "b", Chunks: []pipeline.Chunk{{Text: "x"}}, Vectors: [][]float32{{1, 2}}},
		{DocID: "b", Chunks: []pipeline.Chunk{{Text: "x"}}, Vectors: [][]float32{{1, float32(math.NaN()), 0, 0}}},
	}
	for i, d := range bad {
		if err := ix.ReplaceDocument(ctx, d); err == nil {
			t.Errorf("bad document %d accepted", i)
		}
	}
	if ix.Len() != 2 {
		t.Errorf("Len = %d after refused documents, want 2", ix.Len())
	}
}

func TestReplaceAndDelete(t *testing.T) {
	t.Parallel()
	ix := openExact(t, t.TempDir(), 4, true)
	ctx := context.Background()
	doc := func(texts ...string) Document {
		d := Document{DocID: "d", Title: "D", ContentHash: strings.Join(texts, "")}
		for i, s := range texts {
			d.Chunks = append(d.Chunks, pipeline.Chunk{Text: s})
			d.Vectors = append(d.Vectors, []float32{1, float32(i), 0, 0})
		}
		return d
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ix.ReplaceDocument(ctx, doc("a", "b", "c")))
	must(ix.ReplaceDocument(ctx, Document{DocID: "other", Chunks: []pipeline.Chunk{{Text: "o"}}, Vectors: [][]float32{{0, 0, 1, 0}}}))
	must(ix.ReplaceDocument(ctx, doc("x", "y")))
	if ix.Len() != 3 {
		t.Fatalf("Len = %d, want 3", ix.Len())
	}
	hits, _ := ix.Search(ctx, []float32{1, 0.5, 0, 0}, 10, pipeline.Filter{DocIDs: []string{"d"}})
	var texts []string
	for _, h := range hits {
		texts = append(texts, h.ID+"="+h.Text)
	}
	slices.Sort(texts)
	if want := []string{"d#0=x", "d#1=y"}; !slices.Equal(texts, want) {
		t.Errorf("after replace: %v, want %v", texts, want)
	}
	if h, ok := ix.DocumentHash("d"); !ok || h != "xy" {
		t.Errorf("DocumentHash = %q %v", h, ok)
	}
	wantDocs := []ragtime.DocumentInfo{{DocID: "d", Title: "D", ContentHash: "xy", Chunks: 2}, {DocID: "other", Chunks: 1}}
	if got := ix.Documents(); !slices.Equal(got, wantDocs) {
		t.Errorf("Documents = %+v, want %+v", got, wantDocs)
	}
	if ok, err := ix.DeleteDocument(ctx, "d"); !ok || err != nil {
		t.Fatalf("DeleteDocument = %v, %v", ok, err)
	}
	if ok, err := ix.DeleteDocument(ctx, "d"); ok || err != nil {
		t.Fatalf("second DeleteDocument = %v, %v", ok, err)
	}
	if _, ok := ix.DocumentHash("d"); ok || ix.Len() != 1 {
		t.Errorf("deleted document still there (Len %d)", ix.Len())
	}
	// Freed slots are reused rather than growing the slab.
	must(ix.ReplaceDocument(ctx, doc("p", "q", "r")))
	if n := len(ix.st.alive); n != 4 {
		t.Errorf("slab has %d slots, want 4 (freed slots reused)", n)
	}
}

// TestReplaceIsAtomic replaces one document over and over, alternating
// versions of different lengths, while searches run: every search must see
// exactly one complete version.
func TestReplaceIsAtomic(t *testing.T) {
	t.Parallel()
	const dim = 8
	ix := openIndex(t, t.TempDir(), dim, true)
	ctx := context.Background()
	version := func(v int) Document {
		n := 5 + 3*(v%2)
		d := Document{DocID: "d", Title: "D"}
		for i := range n {
			d.Chunks = append(d.Chunks, pipeline.Chunk{Text: "t", Metadata: map[string]string{"v": fmt.Sprint(v)}})
			vec := make([]float32, dim)
			vec[i%dim] = 1
			d.Vectors = append(d.Vectors, vec)
		}
		return d
	}
	if err := ix.ReplaceDocument(ctx, version(0)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Go(func() {
			q := []float32{1, 1, 1, 1, 1, 1, 1, 1}
			for {
				select {
				case <-stop:
					return
				default:
				}
				hits, err := ix.Search(ctx, q, 100, pipeline.Filter{})
				if err != nil {
					errs <- err
					return
				}
				v := hits[0].Metadata["v"]
				var n int
				fmt.Sscan(v, &n)
				if want := 5 + 3*(n%2); len(hits) != want {
					errs <- fmt.Errorf("version %s: saw %d chunks, want %d", v, len(hits), want)
					return
				}
				for _, h := range hits {
					if h.Metadata["v"] != v {
						errs <- fmt.Errorf("saw versions %s and %s in one search", v, h.Metadata["v"])
						return
					}
				}
			}
		})
	}
	for v := 1; v <= 300; v++ {
		if err := ix.ReplaceDocument(ctx, version(v)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestPersistenceRoundTrip(t *testing.T) {
	t.Parallel()
	const dim = 24
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	w := openIndex(t, dir, dim, true)
	all := fillRandom(t, w, r, 200, dim)
	if _, err := w.DeleteDocument(context.Background(), "doc1"); err != nil {
		t.Fatal(err)
	}
	for id := range all {
		if strings.HasPrefix(id, "doc1#") {
			delete(all, id)
		}
	}
	if err := w.Save(); err != nil {
		t.Fatal(err)
	}
	if w.Generation() != 0 {
		t.Errorf("generation %d after a save, want 0: only a compaction writes a snapshot", w.Generation())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// First from the log alone, then from a compacted snapshot.
	for _, compact := range []bool{false, true} {
		if compact {
			w := openIndex(t, dir, dim, true)
			st, err := w.Compact(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Generation != 1 || w.Generation() != 1 || st.Chunks != len(all) {
				t.Errorf("compaction %+v, generation %d", st, w.Generation())
			}
			w.Close()
		}
		checkPersisted(t, dir, dim, r, all, w.Documents())
	}
}

func checkPersisted(t *testing.T, dir string, dim int, r *rand.Rand, all map[string][]float32, docs []ragtime.DocumentInfo) {
	t.Helper()
	rd := openIndex(t, dir, dim, false)
	if rd.Len() != len(all) {
		t.Fatalf("loaded %d chunks, want %d", rd.Len(), len(all))
	}
	if got := rd.Documents(); !slices.Equal(got, docs) {
		t.Errorf("documents differ after reload")
	}
	for range 3 {
		q := randomVector(r, dim)
		got, err := rd.Search(context.Background(), q, 15, pipeline.Filter{Metadata: map[string]string{"parity": "0"}})
		if err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, got, bruteForce(all, q, 15, func(id string) bool {
			var d int
			fmt.Sscanf(id, "doc%d", &d)
			return d%2 == 0
		}))
		for _, h := range got {
			if !strings.HasPrefix(h.Text, "chunk ") || !strings.HasPrefix(h.Title, "Doc ") {
				t.Fatalf("chunk fields lost: %+v", h.Chunk)
			}
		}
	}
	if err := rd.ReplaceDocument(context.Background(), Document{DocID: "x"}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only ReplaceDocument: %v", err)
	}
	if err := rd.Save(); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Save: %v", err)
	}
}

func TestReloadSeesAnotherWriter(t *testing.T) {
	t.Parallel()
	const dim = 8
	dir := t.TempDir()
	ctx := context.Background()
	reader := openIndex(t, dir, dim, false) // before anything exists
	writer := openIndex(t, dir, dim, true)

	if changed, err := reader.Reload(); changed || err != nil {
		t.Fatalf("Reload with no file = %v, %v", changed, err)
	}
	put := func(id string) { t.Helper(); putSaved(t, writer, id) }
	// Searches keep running while the reader reloads.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := reader.Search(ctx, []float32{1, 1, 1, 1, 1, 1, 1, 1}, 3, pipeline.Filter{}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	defer wg.Wait()
	defer close(stop)
	steps := []struct {
		write     string
		wantDocs  int
		wantGen   uint64
		wantFresh bool
	}{
		{"a", 1, 0, true},
		{"", 1, 0, false},
		{"b", 2, 0, true},
		{"", 2, 0, false},
		{"compact", 2, 1, true},
		{"", 2, 1, false},
		{"c", 3, 1, true},
		{"", 3, 1, false},
	}
	for i, s := range steps {
		switch s.write {
		case "":
		case "compact":
			if _, err := writer.Compact(ctx); err != nil {
				t.Fatal(err)
			}
		default:
			put(s.write)
		}
		changed, err := reader.Reload()
		if err != nil {
			t.Fatal(err)
		}
		if changed != s.wantFresh || len(reader.Documents()) != s.wantDocs || reader.Generation() != s.wantGen {
			t.Errorf("step %d: reloaded %v, %d docs, generation %d; want %v, %d, %d",
				i, changed, len(reader.Documents()), reader.Generation(), s.wantFresh, s.wantDocs, s.wantGen)
		}
	}
}

func TestWriterLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := openIndex(t, dir, 8, true)
	_, err := OpenIndex(dir, IndexOptions{Dimension: 8, Embedder: "test", Writable: true})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second writer: %v, want ErrLocked", err)
	}
	if _, err := OpenIndex(dir, IndexOptions{Dimension: 8, Embedder: "test"}); err != nil {
		t.Fatalf("reader next to a writer: %v", err)
	}
	first.Close()
	second := openIndex(t, dir, 8, true)
	second.Close()
}

func TestOpenRefusesAnotherEmbedder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := openIndex(t, dir, 8, true)
	if err := w.Save(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	tests := []struct {
		opts     IndexOptions
		wantFlag string
	}{
		{IndexOptions{Dimension: 16, Embedder: "test"}, "--embed-dimensions=8"},
		{IndexOptions{Dimension: 8, Embedder: "openai"}, "--embedder=test"},
		{IndexOptions{Dimension: 16, Embedder: "test", Writable: true}, "--embed-dimensions=8"},
	}
	for _, tt := range tests {
		_, err := OpenIndex(dir, tt.opts)
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), tt.wantFlag) || !strings.Contains(err.Error(), "--data-dir") {
			t.Errorf("%+v: err = %v, want ErrIncompatible naming %s and --data-dir", tt.opts, err, tt.wantFlag)
		}
	}
	// The refused writer released its lock.
	openIndex(t, dir, 8, true)
}

func TestCorruptFileIsAnError(t *testing.T) {
	t.Parallel()
	const dim = 4
	dir := t.TempDir()
	w := openIndex(t, dir, dim, true)
	r := rand.New(rand.NewPCG(1, 1))
	fillRandom(t, w, r, 6, dim)
	if _, err := w.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	good, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	try := func(name string, content []byte) {
		t.Helper()
		if err := os.WriteFile(w.Path(), content, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := OpenIndex(dir, IndexOptions{Dimension: dim, Embedder: "test"})
		if err == nil {
			t.Fatalf("%s: opened without error", name)
		}
		if !strings.Contains(err.Error(), w.Path()) {
			t.Fatalf("%s: error %q does not name the file", name, err)
		}
	}
	for n := range len(good) {
		try(fmt.Sprintf("truncated to %d bytes", n), good[:n])
	}
	for i := range good {
		bad := slices.Clone(good)
		bad[i] ^= 0x5a
		try(fmt.Sprintf("byte %d flipped", i), bad)
	}
	try("trailing garbage", append(slices.Clone(good), 1, 2, 3))
	huge := slices.Clone(good)
	copy(huge[8:], []byte{0xff, 0xff, 0xff, 0x7f}) // dimension
	try("huge dimension", huge)
}

// TestReloadSeesWritesDuringCompaction: a follower sees a write made while
// the writer compacts (it goes to the compaction's log segment) before the
// compaction commits, and after it, as one document.
func TestReloadSeesWritesDuringCompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	writer, reader := openWriterAndFollower(t)
	put := func(id string) { t.Helper(); putSaved(t, writer, id) }
	ids := func() []string {
		var out []string
		for _, d := range reader.Documents() {
			out = append(out, d.DocID)
		}
		return out
	}
	has := func(id string) bool { return slices.Contains(ids(), id) }
	reload := func(when string) {
		t.Helper()
		if _, err := reader.Reload(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	put("a")
	reload("before")
	writer.hook = func(step string) error {
		switch step {
		case "frozen":
			put("b") // into the segment
			reload("after the freeze")
			if !has("a") || !has("b") {
				t.Errorf("during the compaction the follower holds %v, want a and b", ids())
			}
			put("a") // a replace, in the segment too
			put("c")
			reload("again")
			if got := ids(); len(got) != 3 {
				t.Errorf("during the compaction the follower holds %v, want a, b and c once", got)
			}
		case "committed":
			// The new snapshot is in place and the segment not yet renamed
			// over the log: a follower reading the snapshot must not drop
			// the writes it already shows.
			reload("after the commit")
			if got := ids(); len(got) != 3 || reader.Generation() != 1 {
				t.Errorf("after the commit the follower holds %v at generation %d, want a, b and c at 1", got, reader.Generation())
			}
		}
		return nil
	}
	if _, err := writer.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	writer.hook = nil
	reload("after the compaction")
	put("d")
	reload("after a write")
	if got := ids(); !slices.Equal(got, []string{"a", "b", "c", "d"}) || reader.Generation() != 1 {
		t.Errorf("after the compaction the follower holds %v at generation %d, want a-d at 1", got, reader.Generation())
	}
	if n := reader.Len(); n != 4 {
		t.Errorf("the follower holds %d chunks, want 4", n)
	}
}

// openWriterAndFollower opens an index of 8-dimensional vectors that
// compacts only when told, and a read-only index of the same directory
// that follows it (Reload).
func openWriterAndFollower(t *testing.T) (writer, follower *Index) {
	t.Helper()
	dir := t.TempDir()
	writer = openIndexOpts(t, dir, IndexOptions{Dimension: 8, Embedder: "test", Writable: true, CompactAfter: -1})
	return writer, openIndex(t, dir, 8, false)
}

// putSaved stores a one-chunk document id (an 8-dimensional vector) in w
// and saves it, as an API write is acknowledged.
func putSaved(t *testing.T, w *Index, id string) {
	t.Helper()
	err := w.ReplaceDocument(context.Background(), Document{DocID: id, Chunks: []pipeline.Chunk{{Text: id}}, Vectors: [][]float32{{1, 2, 3, 4, 5, 6, 7, 8}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Save(); err != nil {
		t.Fatal(err)
	}
}

// TestFollowerConvergesThroughCompactions: a writer replaces and deletes
// documents while compactions run one after another and a follower reloads
// all along. Every state the follower shows is one the writer had (a write
// applied out of order would show a mix that never existed), and once the
// writer stops the follower holds exactly the writer's documents at their
// last versions.
func TestFollowerConvergesThroughCompactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	writer, reader := openWriterAndFollower(t)
	r := rand.New(rand.NewPCG(11, 12))
	state := func(docs []ragtime.DocumentInfo) string {
		var b strings.Builder
		for _, d := range docs { // sorted by id
			fmt.Fprintf(&b, "%s=%s ", d.DocID, d.ContentHash)
		}
		return b.String()
	}
	had := map[string]bool{state(nil): true}
	var seen []string
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() { // compactions, back to back
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := writer.Compact(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() { // the follower
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := reader.Reload(); err != nil {
				t.Error(err)
				return
			}
			seen = append(seen, state(reader.Documents()))
		}
	})
	for i := range 400 {
		id := fmt.Sprintf("doc%d", r.IntN(25))
		if r.IntN(5) == 0 {
			if _, err := writer.DeleteDocument(ctx, id); err != nil {
				t.Fatal(err)
			}
		} else {
			err := writer.ReplaceDocument(ctx, Document{DocID: id, ContentHash: fmt.Sprintf("v%d", i),
				Chunks: []pipeline.Chunk{{Text: id}}, Vectors: [][]float32{randomVector(r, 8)}})
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := writer.Save(); err != nil {
			t.Fatal(err)
		}
		had[state(writer.Documents())] = true
	}
	close(done)
	wg.Wait()
	for _, s := range seen {
		if !had[s] {
			t.Fatalf("the follower showed a state the writer never had: %s", s)
		}
	}
	want := writer.Documents()
	var got []ragtime.DocumentInfo
	for range 3 { // a compaction's renames may need a second look
		if _, err := reader.Reload(); err != nil {
			t.Fatal(err)
		}
		if got = reader.Documents(); reflect.DeepEqual(got, want) {
			return
		}
	}
	t.Errorf("the follower holds %v, the writer %v", got, want)
}
