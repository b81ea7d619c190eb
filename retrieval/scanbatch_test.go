package retrieval

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"ragtime/pipeline"
)

// TestScanBatchEqualsScanRange checks that scoring several queries in one
// pass gives each exactly (same slots, same float32 scores, same order)
// what a scan of its own gives.
func TestScanBatchEqualsScanRange(t *testing.T) {
	t.Parallel()
	const dim, n = 37, 700
	r := rand.New(rand.NewPCG(5, 6))
	ix := openExact(t, t.TempDir(), dim, true)
	fillRandom(t, ix, r, n, dim)
	if _, err := ix.DeleteDocument(context.Background(), "doc3"); err != nil { // dead slots are skipped
		t.Fatal(err)
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var batch []*batchScan
	for i := range 6 {
		q := randomVector(r, dim)
		k := 1 + 7*i
		batch = append(batch, &batchScan{q: q, top: topK{k: k, items: make([]scored, 0, k)}})
	}
	ix.st.scanBatch(dim, batch)
	for i, s := range batch {
		want, err := ix.st.scanRange(context.Background(), dim, s.q, s.top.k, 0, len(ix.st.alive))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.top.sorted(), want.sorted(); !slices.Equal(got, want) {
			t.Errorf("query %d: batched %v, alone %v", i, got, want)
		}
	}
}

// TestConcurrentSearchesMatchAlone runs many searches at once, more than
// GOMAXPROCS so that some wait and are scanned in batches, and checks
// every result is the one the same search made alone returned. Not
// parallel: TestSearchMatchesBruteForce sets parallelMin, which Search reads.
func TestConcurrentSearchesMatchAlone(t *testing.T) {
	const dim, n, searchers, each = 256, 1000, 16, 20
	r := rand.New(rand.NewPCG(8, 9))
	ix := openExact(t, t.TempDir(), dim, true)
	fillRandom(t, ix, r, n, dim)
	ctx := context.Background()
	queries := make([][]float32, searchers*each)
	alone := make([][]pipeline.Hit, len(queries))
	for i := range queries {
		queries[i] = randomVector(r, dim)
		var err error
		if alone[i], err = ix.Search(ctx, queries[i], 1+i%10, pipeline.Filter{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for s := range searchers {
		wg.Go(func() {
			for j := range each {
				i := s*each + j
				got, err := ix.Search(ctx, queries[i], 1+i%10, pipeline.Filter{})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) != len(alone[i]) {
					t.Errorf("search %d: %d hits, alone %d", i, len(got), len(alone[i]))
					return
				}
				for h := range got {
					if got[h].ID != alone[i][h].ID || got[h].Score != alone[i][h].Score {
						t.Errorf("search %d hit %d: %s %v, alone %s %v", i, h, got[h].ID, got[h].Score, alone[i][h].ID, alone[i][h].Score)
						return
					}
				}
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	ix.scans.mu.Lock()
	defer ix.scans.mu.Unlock()
	if ix.scans.running != 0 || len(ix.scans.waiting) != 0 {
		t.Fatalf("after the searches: %d scans running, %d waiting", ix.scans.running, len(ix.scans.waiting))
	}
}
