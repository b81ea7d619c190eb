package retrieval

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"ragtime/pipeline"
)

// benchIndex builds an in-memory exact index of n random chunks (documents of 10
// chunks) at dimension dim.
func benchIndex(b *testing.B, dir string, n, dim int) *Index {
	b.Helper()
	ix := openExact(b, dir, dim, true)
	r := rand.New(rand.NewPCG(1, 2))
	for d := 0; d*10 < n; d++ {
		doc := Document{DocID: fmt.Sprintf("doc%d", d), Title: "t"}
		for range min(10, n-d*10) {
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: "chunk text"})
			doc.Vectors = append(doc.Vectors, randomVector(r, dim))
		}
		if err := ix.ReplaceDocument(context.Background(), doc); err != nil {
			b.Fatal(err)
		}
	}
	return ix
}

// BenchmarkEmbeddedSearch measures one top-10 search; p50 and p99 of the
// individual searches are reported next to the mean.
func BenchmarkEmbeddedSearch(b *testing.B) {
	const dim = 512
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			ix := benchIndex(b, b.TempDir(), n, dim)
			r := rand.New(rand.NewPCG(3, 4))
			queries := make([][]float32, 64)
			for i := range queries {
				queries[i] = randomVector(r, dim)
			}
			ctx := context.Background()
			var took []time.Duration
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				start := time.Now()
				if _, err := ix.Search(ctx, queries[i%len(queries)], 10, pipeline.Filter{}); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				i++
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkOpenIndex measures loading a compacted exact index of 100k
// chunks at dimension 512 (about 200 MB of vectors), what `ragtime serve
// --store-exact` pays at start and when a writer compacts.
func BenchmarkOpenIndex(b *testing.B) {
	dir := b.TempDir()
	ix := benchIndex(b, dir, 100_000, 512)
	if _, err := ix.Compact(context.Background()); err != nil {
		b.Fatal(err)
	}
	ix.Close()
	for b.Loop() {
		rd, err := OpenIndex(dir, IndexOptions{Dimension: 512, Embedder: "test", Exact: true})
		if err != nil {
			b.Fatal(err)
		}
		if rd.Len() != 100_000 {
			b.Fatalf("loaded %d chunks", rd.Len())
		}
	}
}
