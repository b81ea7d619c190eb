package retrieval

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"ragtime/pipeline"
)

// TestSearchDuringReplaceAndDelete runs searches (plain and filtered)
// while documents of the HNSW-backed index are replaced, re-replaced and
// deleted from other goroutines, above the size where searches use the
// graph. Run under -race it checks the locking; in any mode it checks that
// no search fails, returns more than k hits or a hit of a document never
// stored, and that nothing panics. Bounded in count, not time.
func TestSearchDuringReplaceAndDelete(t *testing.T) {
	const dim, docs, chunks = 16, 40, 40 // 1600 slots: above exactBelow
	ix := openIndex(t, t.TempDir(), dim, true)
	ctx := context.Background()
	newDoc := func(r *rand.Rand, i, n int) Document {
		d := Document{DocID: fmt.Sprintf("doc-%d", i), Title: "T"}
		for range n {
			d.Chunks = append(d.Chunks, pipeline.Chunk{Text: "x"})
			d.Vectors = append(d.Vectors, randomVector(r, dim))
		}
		return d
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range docs {
		if err := ix.ReplaceDocument(ctx, newDoc(r, i, chunks)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for j := range 60 {
				i := r.IntN(docs)
				if j%5 == 4 {
					if _, err := ix.DeleteDocument(ctx, fmt.Sprintf("doc-%d", i)); err != nil {
						t.Error(err)
					}
					continue
				}
				if err := ix.ReplaceDocument(ctx, newDoc(r, i, 1+r.IntN(chunks))); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for s := range 2 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(s), 11))
			for j := range 150 {
				var f pipeline.Filter
				if j%3 == 0 {
					f.DocIDs = []string{fmt.Sprintf("doc-%d", r.IntN(docs))}
				}
				hits, err := ix.Search(ctx, randomVector(r, dim), 10, f)
				if err != nil {
					t.Error(err)
					return
				}
				if len(hits) > 10 {
					t.Errorf("%d hits for k=10", len(hits))
				}
				for _, h := range hits {
					var n int
					if _, err := fmt.Sscanf(h.DocID, "doc-%d", &n); err != nil || n < 0 || n >= docs {
						t.Errorf("hit of unknown document %q", h.DocID)
					}
				}
			}
		})
	}
	wg.Wait()

	// Afterwards, only live chunks are found: no deleted document, no
	// chunk past a replaced document's new length.
	live := map[string]int{}
	for _, d := range ix.Documents() {
		live[d.DocID] = d.Chunks
	}
	for range 50 {
		hits, err := ix.Search(ctx, randomVector(r, dim), 20, pipeline.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if n, ok := live[h.DocID]; !ok || h.Index >= n {
				t.Fatalf("hit %s (chunk %d) is not live; its document has %d chunks (present %v)", h.ID, h.Index, n, ok)
			}
		}
	}
}
