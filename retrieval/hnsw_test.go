package retrieval

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"ragtime/pipeline"
)

// clustered draws n vectors of dimension dim shaped like text embeddings
// rather than uniform noise: each lies near one of `clusters` topic centres
// (Zipf-like topic sizes), with a spread that leaves near neighbours across
// topics, and is normalised.
func clustered(r *rand.Rand, n, dim, clusters int) [][]float32 {
	centres := make([][]float32, clusters)
	for i := range centres {
		centres[i] = randomVector(r, dim)
	}
	out := make([][]float32, n)
	for i := range out {
		// Topic sizes fall off like 1/rank.
		c := int(float64(clusters) * math.Pow(r.Float64(), 2))
		v := make([]float32, dim)
		var sum float64
		for j := range v {
			v[j] = centres[c][j] + float32(0.55*r.NormFloat64())
			sum += float64(v[j]) * float64(v[j])
		}
		inv := float32(1 / math.Sqrt(sum))
		for j := range v {
			v[j] *= inv
		}
		out[i] = v
	}
	return out
}

// fillDocs stores vecs as documents of perDoc chunks named doc<i>.
func fillDocs(t testing.TB, ix *Index, vecs [][]float32, perDoc int) {
	t.Helper()
	fillNamed(t, ix, "doc", vecs, perDoc)
}

func fillNamed(t testing.TB, ix *Index, prefix string, vecs [][]float32, perDoc int) {
	t.Helper()
	for lo, d := 0, 0; lo < len(vecs); lo, d = lo+perDoc, d+1 {
		doc := Document{DocID: fmt.Sprintf("%s%d", prefix, d)}
		for _, v := range vecs[lo:min(lo+perDoc, len(vecs))] {
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: "x"})
			doc.Vectors = append(doc.Vectors, v)
		}
		if err := ix.ReplaceDocument(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
	}
}

// recallAt is the fraction of the exact top k found by the approximate one.
func recallAt(t testing.TB, ann, exact *Index, queries [][]float32, k int) float64 {
	t.Helper()
	found, total := 0, 0
	for _, q := range queries {
		want, err := exact.Search(context.Background(), q, k, pipeline.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := ann.Search(context.Background(), q, k, pipeline.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, h := range got {
			ids[h.ID] = true
		}
		for _, h := range want {
			total++
			if ids[h.ID] {
				found++
			}
		}
	}
	return float64(found) / float64(total)
}

func TestANNRecallAgainstExact(t *testing.T) {
	t.Parallel()
	const n, dim = 6000, 48
	r := rand.New(rand.NewPCG(11, 12))
	vecs := clustered(r, n+100, dim, 40)
	ann := openIndex(t, t.TempDir(), dim, true)
	exact := openExact(t, t.TempDir(), dim, true)
	fillDocs(t, ann, vecs[:n], 7)
	fillDocs(t, exact, vecs[:n], 7)
	queries := vecs[n:]
	if rec := recallAt(t, ann, exact, queries, 10); rec < 0.95 {
		t.Errorf("recall@10 = %.3f, want ≥ 0.95", rec)
	}
	hits, _ := ann.Search(context.Background(), queries[0], 10, pipeline.Filter{})
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Fatalf("hits not best first: %v", hits)
		}
	}

	// Delete every other document: none of it may be found, and what is
	// left is still found.
	for d := 0; d < n/7; d += 2 {
		for _, ix := range []*Index{ann, exact} {
			if _, err := ix.DeleteDocument(context.Background(), fmt.Sprintf("doc%d", d)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range queries {
		hits, _ := ann.Search(context.Background(), q, 10, pipeline.Filter{})
		for _, h := range hits {
			var d int
			fmt.Sscanf(h.DocID, "doc%d", &d)
			if d%2 == 0 {
				t.Fatalf("deleted %s found", h.ID)
			}
		}
	}
	if rec := recallAt(t, ann, exact, queries, 10); rec < 0.93 {
		t.Errorf("recall@10 after deleting half = %.3f, want ≥ 0.93", rec)
	}
	if ann.Exact() || !exact.Exact() || ann.Ef() != DefaultEf {
		t.Error("Exact/Ef do not report the options")
	}
}

func TestANNGraphPersists(t *testing.T) {
	t.Parallel()
	const n, dim = 2000, 32
	r := rand.New(rand.NewPCG(5, 6))
	vecs := clustered(r, n+50, dim, 20)
	dir := t.TempDir()
	w := openIndex(t, dir, dim, true)
	fillDocs(t, w, vecs[:n], 5)
	if _, err := w.DeleteDocument(context.Background(), "doc3"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	graphPath := filepath.Join(dir, indexDirName, graphFileName)
	if _, err := os.Stat(graphPath); err != nil {
		t.Fatalf("no graph file after Compact: %v", err)
	}
	exact := openExact(t, dir, dim, false)
	if _, err := readGraph(graphPath, exact.Len(), w.Generation()); err != nil {
		t.Fatalf("the saved graph file does not load: %v", err)
	}
	loaded := openIndex(t, dir, dim, false)
	if rec := recallAt(t, loaded, exact, vecs[n:], 10); rec < 0.95 {
		t.Errorf("recall@10 of the loaded graph = %.3f", rec)
	}
	// Same searches as the writer's in-memory graph, minus nothing.
	for _, q := range vecs[n : n+10] {
		a, _ := w.Search(context.Background(), q, 5, pipeline.Filter{})
		b, _ := loaded.Search(context.Background(), q, 5, pipeline.Filter{})
		if len(a) != len(b) || a[0].ID != b[0].ID {
			t.Fatalf("writer found %v, reader of the saved graph %v", a, b)
		}
	}
	// A damaged graph file is an error naming it, not a quiet rebuild.
	good, err := os.ReadFile(graphPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 9, 20, len(good) / 2, len(good) - 1} {
		bad := slices.Clone(good)
		bad[i] ^= 0x01
		os.WriteFile(graphPath, bad, 0o644)
		_, err := OpenIndex(dir, IndexOptions{Dimension: dim, Embedder: "test"})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), graphPath) {
			t.Errorf("graph file with byte %d flipped: err = %v, want ErrCorrupt naming the file", i, err)
		}
	}
	os.WriteFile(graphPath, good[:len(good)-3], 0o644)
	if _, err := OpenIndex(dir, IndexOptions{Dimension: dim, Embedder: "test"}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("truncated graph file: err = %v, want ErrCorrupt", err)
	}
	// A missing graph file (an index written with --store-exact) is rebuilt.
	os.Remove(graphPath)
	if rec := recallAt(t, openIndex(t, dir, dim, false), exact, vecs[n:], 10); rec < 0.95 {
		t.Errorf("recall@10 without a graph file = %.3f", rec)
	}
}

// TestANNSearchesDuringWrites runs searches while documents are added and
// replaced: every search must succeed and return only live chunks.
func TestANNSearchesDuringWrites(t *testing.T) {
	t.Parallel()
	const dim = 24
	r := rand.New(rand.NewPCG(8, 9))
	vecs := clustered(r, 1500, dim, 15)
	ix := openIndex(t, t.TempDir(), dim, true)
	fillDocs(t, ix, vecs[:500], 5)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for w := range 2 {
		wg.Go(func() {
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				hits, err := ix.Search(context.Background(), vecs[(i*7+w)%len(vecs)], 10, pipeline.Filter{})
				if err != nil || len(hits) == 0 {
					errs <- fmt.Errorf("search during writes: %d hits, %v", len(hits), err)
					return
				}
			}
		})
	}
	fillNamed(t, ix, "more", vecs[500:], 5)
	fillDocs(t, ix, vecs[:500], 4) // replace the first documents with other chunkings
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ix.Len() != 1500 {
		t.Errorf("Len = %d", ix.Len())
	}
}

// TestGraphThreshold checks IndexOptions.GraphFrom: below it the index has
// no graph (searches exact, no graph file, no rebuild at open); the write
// that takes it past builds the graph in the background, searches finding
// every chunk meanwhile; the compaction after saves it; and an open whose
// log takes the snapshot past the threshold builds it too.
func TestGraphThreshold(t *testing.T) {
	t.Parallel()
	const dim, below, perDoc = 32, 1500, 5
	from := int64(2000 * dim * 4) // 2,000 chunks' vectors
	r := rand.New(rand.NewPCG(7, 8))
	vecs := clustered(r, 2600, dim, 20)
	queries := vecs[2500:]
	dir := t.TempDir()
	var logs strings.Builder
	opts := IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1, GraphFrom: from,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	w := openIndexOpts(t, dir, opts)
	fillDocs(t, w, vecs[:below], perDoc)
	hasGraph := func(ix *Index) bool {
		ix.mu.RLock()
		defer ix.mu.RUnlock()
		return ix.st.graph != nil
	}
	if hasGraph(w) {
		t.Fatalf("a graph below the threshold (%d chunks, %d bytes of vectors, threshold %d)", below, below*dim*4, from)
	}
	exact := openExact(t, t.TempDir(), dim, true)
	fillDocs(t, exact, vecs[:below], perDoc)
	if rec := recallAt(t, w, exact, queries, 10); rec != 1 {
		t.Errorf("recall@10 below the threshold = %.3f, want 1 (an exact scan)", rec)
	}
	if _, err := w.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	graphPath := filepath.Join(dir, indexDirName, graphFileName)
	if _, err := os.Stat(graphPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a graph file below the threshold: %v", err)
	}
	// Past it: the graph starts, its chunks linked in the background.
	fillNamed(t, w, "more", vecs[below:2500], perDoc)
	fillNamed(t, exact, "more", vecs[below:2500], perDoc)
	if !hasGraph(w) {
		t.Fatalf("no graph past the threshold (2,500 chunks)")
	}
	if !strings.Contains(logs.String(), "passed the graph threshold") {
		t.Errorf("no log line for the graph's start: %s", logs.String())
	}
	if rec := recallAt(t, w, exact, queries, 10); rec < 0.95 { // linked or not, every chunk is searched
		t.Errorf("recall@10 while the graph is built = %.3f", rec)
	}
	w.linkLoaded()
	if rec := recallAt(t, w, exact, queries, 10); rec < 0.95 {
		t.Errorf("recall@10 of the built graph = %.3f", rec)
	}
	if _, err := w.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(graphPath); err != nil {
		t.Errorf("no graph file after a compaction past the threshold: %v", err)
	}
	w.Close()

	// A snapshot below the threshold whose log takes it past: the open
	// builds the graph.
	dir2 := t.TempDir()
	w2 := openIndexOpts(t, dir2, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1, GraphFrom: from})
	fillDocs(t, w2, vecs[:below], perDoc)
	if _, err := w2.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	w2.exact = true // log the rest without starting a graph, as an exact writer would
	fillNamed(t, w2, "more", vecs[below:2500], perDoc)
	if err := w2.Save(); err != nil {
		t.Fatal(err)
	}
	w2.Close()
	logs.Reset()
	r2 := openIndexOpts(t, dir2, IndexOptions{Dimension: dim, Embedder: "test", GraphFrom: from,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !hasGraph(r2) || !strings.Contains(logs.String(), "passed the graph threshold") {
		t.Errorf("an open past the threshold built no graph: %s", logs.String())
	}
	if rec := recallAt(t, r2, exact, queries, 10); rec < 0.95 {
		t.Errorf("recall@10 after the open = %.3f", rec)
	}

	// Writes during a compaction take it past: the graph starts as the
	// compaction ends (the state it swaps in has none).
	w3 := openIndexOpts(t, t.TempDir(), IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1, GraphFrom: from})
	fillDocs(t, w3, vecs[:below], perDoc)
	w3.hook = func(step string) error {
		if step == "frozen" {
			fillNamed(t, w3, "more", vecs[below:2500], perDoc)
		}
		return nil
	}
	if _, err := w3.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	w3.hook = nil
	if !hasGraph(w3) {
		t.Errorf("writes during a compaction took the index past the threshold, and it has no graph after it")
	}
	if rec := recallAt(t, w3, exact, queries, 10); rec < 0.95 {
		t.Errorf("recall@10 after that compaction = %.3f", rec)
	}

	if _, err := OpenIndex(t.TempDir(), IndexOptions{Dimension: dim, Embedder: "test", GraphFrom: -1}); err == nil ||
		!strings.Contains(err.Error(), "--index-graph-mb") {
		t.Errorf("a negative threshold: err = %v, want one naming --index-graph-mb", err)
	}
}
