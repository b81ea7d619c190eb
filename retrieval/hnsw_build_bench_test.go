package retrieval

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkHNSWBuild inserts 6,000 clustered 512-dimensional vectors (the
// hash embedder's default dimension), 8 chunks a document, into an empty
// index: the graph insertion that dominates an ingest's CPU. Run it with
// -cpu 1 to time the work rather than the parallel planning.
func BenchmarkHNSWBuild(b *testing.B) {
	vecs := clustered(rand.New(rand.NewPCG(7, 7)), 6000, 512, 60)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ix := openIndex(b, b.TempDir(), 512, true)
		b.StartTimer()
		fillDocs(b, ix, vecs, 8)
	}
}
