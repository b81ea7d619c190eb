package retrieval

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"ragtime/pipeline"
)

// annFixture is a saved index of n clustered 384-dimensional vectors and
// its query set, cached under the system temp dir so a benchmark run after
// the first skips the build (minutes at 1M vectors).
type annFixture struct {
	dir     string
	queries [][]float32
	build   time.Duration
}

const annDim = 384

// benchFixtureDir is where a benchmark caches the index of n chunks it
// builds (minutes at a million) under the system temp dir, for the runs
// after the first. The name holds what shapes the graph (M and
// efConstruction), so a change to them builds a new fixture rather than
// measuring the graph the old ones built.
func benchFixtureDir(name string, n int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("ragtime-bench-%s-%d-m%d-efc%d", name, n, hnswM, hnswEfConstruction))
}

func annSetup(b *testing.B, n int) annFixture {
	b.Helper()
	r := rand.New(rand.NewPCG(uint64(n), 384))
	vecs := clustered(r, n+1000, annDim, max(50, n/1000))
	dir := benchFixtureDir("ann", n)
	f := annFixture{dir: dir, queries: vecs[n:]}
	if _, err := os.Stat(filepath.Join(dir, indexDirName, graphFileName)); err == nil {
		return f
	}
	os.RemoveAll(dir)
	ix, err := OpenIndex(dir, IndexOptions{Dimension: annDim, Embedder: "bench", Writable: true})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	fillDocs(b, ix, vecs[:n], 10)
	f.build = time.Since(start)
	if _, err := ix.Compact(context.Background()); err != nil {
		b.Fatal(err)
	}
	ix.Close()
	return f
}

// BenchmarkANNSearch measures top-10 searches of the HNSW index on
// clustered 384-dimensional vectors and reports, beside ns/op: p50 and p99
// latency, recall@10 against the exact scan of the same index, how many
// times faster than the exact scan it is, and heap bytes per stored vector
// (vector, graph and chunk together). The 1M case runs only when named
// (-bench 'ANNSearch/1M'): its first run builds the index for many minutes.
func BenchmarkANNSearch(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		name := fmt.Sprintf("%dk", n/1000)
		if n >= 1_000_000 {
			name = fmt.Sprintf("%dM", n/1_000_000)
			if p := flag.Lookup("test.bench").Value.String(); !strings.Contains(p, "1M") {
				b.Run(name, func(b *testing.B) { b.Skip("run with -bench 'ANNSearch/1M' (builds a 1M-vector index)") })
				continue
			}
		}
		b.Run(name, func(b *testing.B) {
			f := annSetup(b, n)
			if f.build > 0 {
				b.Logf("built %d vectors in %s (%.0f vectors/s)", n, f.build.Round(time.Second), float64(n)/f.build.Seconds())
			}
			exact, err := OpenIndex(f.dir, IndexOptions{Dimension: annDim, Embedder: "bench", Exact: true})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			sample := f.queries[:100]
			for _, q := range sample { // warm up
				exact.Search(ctx, q, 10, pipeline.Filter{})
			}
			t0 := time.Now()
			for _, q := range sample {
				exact.Search(ctx, q, 10, pipeline.Filter{})
			}
			exactMean := time.Since(t0) / time.Duration(len(sample))
			for _, ef := range []int{32, 48, 64, 96, 128} {
				b.Run(fmt.Sprintf("ef=%d", ef), func(b *testing.B) {
					runtime.GC()
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					ix, err := OpenIndex(f.dir, IndexOptions{Dimension: annDim, Embedder: "bench", Ef: ef})
					if err != nil {
						b.Fatal(err)
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					for _, q := range f.queries[:100] { // warm up
						ix.Search(ctx, q, 10, pipeline.Filter{})
					}
					// Latency of each query, one at a time.
					lat := make([]time.Duration, 0, len(f.queries))
					for _, q := range f.queries {
						t0 := time.Now()
						if _, err := ix.Search(ctx, q, 10, pipeline.Filter{}); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(t0))
					}
					slices.Sort(lat)
					var annTotal time.Duration
					for _, d := range lat {
						annTotal += d
					}
					annMean := annTotal / time.Duration(len(lat))
					rec := recallAt(b, ix, exact, sample, 10)
					b.ResetTimer()
					for i := 0; b.Loop(); i++ {
						ix.Search(ctx, f.queries[i%len(f.queries)], 10, pipeline.Filter{})
					}
					b.StopTimer()
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
					b.ReportMetric(rec, "recall@10")
					b.ReportMetric(float64(exactMean)/float64(annMean), "x-faster-than-exact")
					b.ReportMetric(float64(exactMean.Microseconds()), "exact-µs")
					b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/vector")
					runtime.KeepAlive(ix)
				})
			}
		})
	}
}
