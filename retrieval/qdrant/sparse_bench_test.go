package qdrant

import (
	"context"
	"sync"
	"testing"

	"ragtime/lexical"
	"ragtime/pipeline"
	"ragtime/retrieval"
)

// chunkStore keeps what an ingest stores, to benchmark on real chunks.
type chunkStore struct {
	mu     sync.Mutex
	chunks []pipeline.Chunk
}

func (c *chunkStore) StoredHash(context.Context, string) (string, bool, error) { return "", false, nil }
func (c *chunkStore) Flush(context.Context) error                              { return nil }
func (c *chunkStore) ReplaceDocument(_ context.Context, d retrieval.Document) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range d.Chunks {
		if ch.Title == "" {
			ch.Title = d.Title
		}
		c.chunks = append(c.chunks, ch)
	}
	return nil
}

// docsChunks are ragtime's docs/ as ingest chunks them (the defaults):
// English technical prose, as a user's corpus is.
func docsChunks(b *testing.B) []pipeline.Chunk {
	b.Helper()
	emb, err := retrieval.NewHashEmbedder(64)
	if err != nil {
		b.Fatal(err)
	}
	st := &chunkStore{}
	in := &retrieval.Ingester{Embedder: emb, Store: st}
	if _, err := in.Ingest(context.Background(), []string{"../../docs"}, nil); err != nil {
		b.Fatal(err)
	}
	if len(st.chunks) < 100 {
		b.Fatalf("docs/ gave %d chunks", len(st.chunks))
	}
	return st.chunks
}

// BenchmarkSparseEncode is the lexical leg's cost at ingest into Qdrant,
// per chunk of docs/ at the default chunk size: analyse is the analyzer
// alone (words, stop words, stemming, title field: what the embedded
// store's lexical index pays as well), sparse the sparse vector of an
// analysed chunk (hashing, sorting, BM25 saturation), analyse+sparse both:
// what a chunk written to Qdrant costs beside its embedding. Each reports µs/chunk, the
// entries a vector has and the chunks' mean analysed length (what
// lexical.SparseAvgLen stands for).
//
//	go test -run '^$' -bench SparseEncode -count 5 ./retrieval/qdrant/
func BenchmarkSparseEncode(b *testing.B) {
	chunks := docsChunks(b)
	var entries, length int
	docs := make([]lexical.Doc, len(chunks))
	for i := range chunks {
		d := retrieval.AnalyseChunk(&chunks[i])
		docs[i] = d
		ix, _ := d.Sparse()
		entries += len(ix)
		length += d.Len()
	}
	for _, bc := range []struct {
		name            string
		analyse, sparse bool
	}{{"analyse", true, false}, {"analyse+sparse", true, true}, {"sparse", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				d := docs[n%len(docs)]
				if bc.analyse {
					d = retrieval.AnalyseChunk(&chunks[n%len(chunks)])
				}
				if bc.sparse {
					if ix, vals := d.Sparse(); len(ix) != len(vals) {
						b.Fatal("indices and values differ")
					}
				}
				n++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(n), "µs/chunk")
			b.ReportMetric(float64(entries)/float64(len(chunks)), "entries/chunk")
			b.ReportMetric(float64(length)/float64(len(chunks)), "avglen")
			b.ReportMetric(float64(len(chunks)), "chunks")
		})
	}
}
