package retrieval

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ragtime"
	"ragtime/lexical"
	"ragtime/pipeline"
)

// BenchmarkHybridSearch measures the search stage of an ask as serve runs
// it by default on the embedded store: the pipeline's own search path
// (Pipeline.Search, whose search span is timed) with serve's defaults —
// hybrid retrieval, top_k 5, each leg max(top_k, 50) deep, the vector leg
// (hash embedder at 512 dimensions; at 10k chunks, 19.5 MiB of vectors,
// below --index-graph-mb, an exact scan, and 10k-graph the same with the
// HNSW graph; at 300k and 1M the graph) on
// its own goroutine beside the BM25 leg, collapse by document and the hash embedder's default fusion
// (weighted, vector leg 0.3). The corpus is lexical's synthetic one (chunks
// of 150 Zipf-drawn words, ten chunks a document). It reports the search
// stage's p50, p99 and mean, and each leg's and the fusion's p50 and p99 as
// the stage's attrs give them; the embed stage is not counted.
//
// 300k and 1M run only when named (-bench 'HybridSearch/1M'): their index
// is built once (the 1M one for many minutes) and cached under the system
// temp dir (benchFixtureDir).
func BenchmarkHybridSearch(b *testing.B) {
	pattern := flag.Lookup("test.bench").Value.String()
	for _, n := range []int{10_000, 300_000, 1_000_000} {
		name := fmt.Sprintf("%dk", n/1000)
		if n >= 1_000_000 {
			name = fmt.Sprintf("%dM", n/1_000_000)
		}
		if n > 10_000 && !strings.Contains(pattern, name) {
			b.Run(name, func(b *testing.B) {
				b.Skipf("run with -bench 'HybridSearch/%s' (builds a %s-chunk index, cached under %s)", name, name, os.TempDir())
			})
			continue
		}
		b.Run(name, func(b *testing.B) { benchHybridSearch(b, n, DefaultGraphFromMB<<20) })
		if n == 10_000 { // the same with the graph serve builds only past --index-graph-mb
			b.Run(name+"-graph", func(b *testing.B) { benchHybridSearch(b, n, 0) })
		}
	}
}

const hybridBenchDim = 512

func benchHybridSearch(b *testing.B, n int, graphFrom int64) {
	emb, err := NewHashEmbedder(hybridBenchDim)
	if err != nil {
		b.Fatal(err)
	}
	ix, queries := hybridBenchIndex(b, emb, n, graphFrom)
	w := 0.3 // serve's default fusion over the hash embedder (cmd/ragtime defaultFusion)
	p, err := pipeline.New(pipeline.Config{Embedder: emb, Searcher: ix, Lexical: ix,
		Fusion:    pipeline.Fusion{Method: pipeline.FusionWeighted, VectorWeight: &w},
		Generator: nopGenerator{}, Counter: wordCounter{}, EmbedderName: "hash", StoreName: "embedded"})
	if err != nil {
		b.Fatal(err)
	}
	defaults := pipeline.Defaults{Retrieval: ragtime.RetrievalHybrid, Lexical: true}
	ctx := context.Background()
	runtime.GC()
	var took, vtook, ltook, ftook []float64 // ms
	i := 0
	for b.Loop() {
		req := pipeline.Request{Question: queries[i%len(queries)], TopK: pipeline.Unset, RerankTopN: 0,
			VectorK: pipeline.Unset, LexicalK: pipeline.Unset, MaxTokens: pipeline.Unset}
		i++
		if err := req.NormalizeWith(0, defaults); err != nil {
			b.Fatal(err)
		}
		res, err := p.Search(ctx, &req)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Hits) == 0 {
			b.Fatalf("query %q found nothing", req.Question)
		}
		j := slices.IndexFunc(res.Stages, func(s ragtime.Span) bool { return s.Name == ragtime.StageSearch })
		if j < 0 {
			b.Fatal("no search stage")
		}
		s := res.Stages[j]
		if s.Attrs["retrieval"] != ragtime.RetrievalHybrid || s.Attrs["collapse"] != pipeline.CollapseDoc ||
			s.Attrs["fusion"] != pipeline.FusionWeighted || s.Attrs["vector_k"] != 50 || s.Attrs["lexical_k"] != 50 {
			b.Fatalf("search stage attrs %v: not serve's default hybrid", s.Attrs)
		}
		took = append(took, s.DurationMs)
		vtook = append(vtook, s.Attrs["vector_ms"].(float64))
		ltook = append(ltook, s.Attrs["lexical_ms"].(float64))
		ftook = append(ftook, s.Attrs["fusion_ms"].(float64))
	}
	mean := 0.0
	for _, d := range took {
		mean += d
	}
	mean /= float64(len(took))
	q := func(d []float64, p int) float64 {
		slices.Sort(d)
		return d[len(d)*p/100] * 1000
	}
	b.ReportMetric(q(took, 50), "p50-µs")
	b.ReportMetric(q(took, 99), "p99-µs")
	b.ReportMetric(mean*1000, "mean-µs")
	b.ReportMetric(q(vtook, 50), "vector-p50-µs")
	b.ReportMetric(q(vtook, 99), "vector-p99-µs")
	b.ReportMetric(q(ltook, 50), "lexical-p50-µs")
	b.ReportMetric(q(ltook, 99), "lexical-p99-µs")
	b.ReportMetric(q(ftook, 50), "fusion-p50-µs")
}

// hybridBenchIndex returns an index of n synthetic chunks with their hash
// vectors and lexical postings, and the corpus's queries. Up to 10k it is
// built in memory; larger ones are built once into a cached data dir,
// compacted (snapshot, graph and lexical file) and opened read-only.
func hybridBenchIndex(b *testing.B, emb *HashEmbedder, n int, graphFrom int64) (*Index, []string) {
	b.Helper()
	opts := IndexOptions{Dimension: hybridBenchDim, Embedder: "hash", GraphFrom: graphFrom}
	if n <= 10_000 {
		wopts := opts
		wopts.Writable, wopts.CompactAfter = true, -1
		ix := openIndexOpts(b, b.TempDir(), wopts)
		return ix, fillHybridBench(b, ix, emb, n)
	}
	dir := benchFixtureDir("hybrid", n)
	if _, err := os.Stat(filepath.Join(dir, indexDirName, graphFileName)); err != nil {
		os.RemoveAll(dir)
		wopts := opts
		wopts.Writable, wopts.CompactAfter = true, -1
		ix, err := OpenIndex(dir, wopts)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		fillHybridBench(b, ix, emb, n)
		filled := time.Since(start)
		if _, err := ix.Compact(context.Background()); err != nil {
			b.Fatal(err)
		}
		if err := ix.Close(); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "hybrid bench: built %d chunks in %s, compacted in %s\n", n,
			filled.Round(time.Second), (time.Since(start) - filled).Round(time.Second))
	}
	start := time.Now()
	ix := openIndexOpts(b, dir, opts)
	fmt.Fprintf(os.Stderr, "hybrid bench: opened %d chunks in %s\n", ix.Len(), time.Since(start).Round(time.Millisecond))
	if ix.Len() != n {
		b.Fatalf("cached index %s holds %d chunks, want %d: remove it", dir, ix.Len(), n)
	}
	queries := lexical.SyntheticCorpus(n, func([]string) {}) // the same queries as the build's
	texts := make([]string, len(queries))
	for i, q := range queries {
		texts[i] = strings.Join(q, " ")
	}
	return ix, texts
}

// fillHybridBench stores lexical's synthetic corpus of n chunks into ix as
// documents of ten chunks, embedding and storing on two goroutines, and
// returns the corpus's queries.
func fillHybridBench(b *testing.B, ix *Index, emb *HashEmbedder, n int) []string {
	b.Helper()
	ctx := context.Background()
	type job struct {
		id    int
		texts []string
	}
	jobs := make(chan job, 64)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	var stored atomic.Int64
	for range 2 {
		wg.Go(func() {
			for j := range jobs {
				if failed.Load() != nil {
					continue
				}
				vecs, err := emb.Embed(ctx, j.texts)
				doc := Document{DocID: fmt.Sprintf("doc%d", j.id), Title: "synthetic", Vectors: vecs}
				for _, t := range j.texts {
					doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: t})
				}
				if err == nil {
					err = ix.ReplaceDocument(ctx, doc)
				}
				if err != nil {
					failed.Store(&err)
					continue
				}
				if c := stored.Add(int64(len(j.texts))); n > 10_000 && c%100_000 == 0 {
					fmt.Fprintf(os.Stderr, "hybrid bench: %d chunks stored\n", c)
				}
			}
		})
	}
	var texts []string
	docs := 0
	queries := lexical.SyntheticCorpus(n, func(words []string) {
		texts = append(texts, strings.Join(words, " "))
		if len(texts) == 10 {
			jobs <- job{id: docs, texts: texts}
			docs++
			texts = nil
		}
	})
	if len(texts) > 0 {
		jobs <- job{id: docs, texts: texts}
	}
	close(jobs)
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	out := make([]string, len(queries))
	for i, q := range queries {
		out[i] = strings.Join(q, " ")
	}
	return out
}

// nopGenerator and wordCounter complete a pipeline that only searches.
type nopGenerator struct{}

func (nopGenerator) Generate(context.Context, *pipeline.GenerateRequest, func(pipeline.Delta) error, *pipeline.Generation) error {
	return nil
}

type wordCounter struct{}

func (wordCounter) Count(text string) int { return len(strings.Fields(text)) }
