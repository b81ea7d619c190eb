package retrieval

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/trace"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"ragtime/pipeline"
)

// pct returns the p-th percentile of sorted durations in milliseconds.
func pct(sorted []time.Duration, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, len(sorted)*p/100)].Microseconds()) / 1000
}

// BenchmarkAddDuringCompact300MB adds 1 KB documents (one chunk each, made
// durable by Save, as POST /v1/documents does) one after another while the
// ~300 MB index compacts (after a tenth of its documents were replaced, so
// the compaction has chunks to reclaim), and reports their p50, p99 and max
// latency beside the p99 of the same adds with no compaction, the
// compaction's duration and how many adds it saw. The bar: p99-ms-compacting
// ≤ 50.
func BenchmarkAddDuringCompact300MB(b *testing.B) {
	fixture := storeBenchFixture(b)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 3))
	text := strings.Repeat("w", 1000)
	for b.Loop() {
		b.StopTimer()
		dir := copyFixture(b, fixture)
		ix, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
		if err != nil {
			b.Fatal(err)
		}
		vecs := clustered(r, storeBenchChunks/10, storeBenchDim, 100)
		for d := 0; d < storeBenchChunks/100; d++ {
			doc := Document{DocID: fmt.Sprintf("doc%06d", d*10), Title: "R"}
			for _, v := range vecs[d*10 : d*10+10] {
				doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: strings.Repeat("z", 1000)})
				doc.Vectors = append(doc.Vectors, v)
			}
			if err := ix.ReplaceDocument(ctx, doc); err != nil {
				b.Fatal(err)
			}
		}
		n := 0
		add := func() time.Duration {
			t0 := time.Now()
			defer trace.StartRegion(ctx, "add").End() // for `go test -trace`, as the searches below
			doc := Document{DocID: fmt.Sprintf("add%06d", n), Title: "Add", ContentHash: "h",
				Chunks: []pipeline.Chunk{{Text: text}}, Vectors: [][]float32{vecs[n%len(vecs)]}}
			n++
			if err := ix.ReplaceDocument(ctx, doc); err != nil {
				b.Fatal(err)
			}
			if err := ix.Save(); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		}
		var idle []time.Duration
		for range 200 {
			idle = append(idle, add())
		}
		var done atomic.Bool
		var stats CompactStats
		var cerr error
		finished := make(chan struct{})
		b.StartTimer()
		go func() {
			defer close(finished)
			stats, cerr = ix.Compact(ctx)
			done.Store(true)
		}()
		var during []time.Duration
		for !done.Load() {
			during = append(during, add())
		}
		<-finished
		b.StopTimer()
		if cerr != nil {
			b.Fatal(cerr)
		}
		if err := ix.Close(); err != nil {
			b.Fatal(err)
		}
		slices.Sort(idle)
		slices.Sort(during)
		b.ReportMetric(pct(during, 50), "p50-ms-compacting")
		b.ReportMetric(pct(during, 99), "p99-ms-compacting")
		b.ReportMetric(pct(during, 100), "max-ms-compacting")
		b.ReportMetric(pct(idle, 99), "p99-ms-idle")
		b.ReportMetric(float64(len(during)), "adds-during")
		b.ReportMetric(stats.Took.Seconds(), "compact-s")
		b.ReportMetric(float64(stats.Freeze.Microseconds())/1000, "freeze-hold-ms")
		b.ReportMetric(float64(stats.CopyHold.Microseconds())/1000, "copy-hold-ms")
		b.ReportMetric(float64(stats.Swap.Microseconds())/1000, "swap-hold-ms")
		b.StartTimer()
	}
}

// BenchmarkSearchDuringUpload300MB searches the ~300 MB index (the vector
// leg, then the lexical leg, as the search stage does) one query after
// another for two seconds with nothing else running, then while a bulk
// upload of 1,000 pages goes on (ten documents of 300 chunks of 1 KB,
// embedded beforehand, each stored and saved as POST /v1/documents does),
// and reports both p99s and their ratio. The bar: ratio ≤ 2.
func BenchmarkSearchDuringUpload300MB(b *testing.B) {
	fixture := storeBenchFixture(b)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(4, 4))
	queries := clustered(r, 256, storeBenchDim, 100)
	words := []string{"lorem ipsum", "dolor sit amet", "consectetur", "adipiscing elit", "sit amet lorem"}
	const uploadDocs, uploadChunks = 10, 300
	for b.Loop() {
		b.StopTimer()
		dir := copyFixture(b, fixture)
		ix, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
		if err != nil {
			b.Fatal(err)
		}
		vecs := clustered(r, uploadDocs*uploadChunks, storeBenchDim, 100)
		text := strings.Repeat("page text of an uploaded manual. ", 31)[:1000]
		search := func(stop *atomic.Bool, max time.Duration) []time.Duration {
			var lat []time.Duration
			start := time.Now()
			for i := 0; !stop.Load() && time.Since(start) < max; i++ {
				t0 := time.Now()
				// A region per search, for `go test -trace`: the longest one
				// shows what a slow search waited for.
				region := trace.StartRegion(ctx, "search")
				if _, err := ix.Search(ctx, queries[i%len(queries)], 10, pipeline.Filter{}); err != nil {
					b.Error(err)
					break
				}
				if _, err := ix.SearchText(ctx, words[i%len(words)], 10, pipeline.Filter{}); err != nil {
					b.Error(err)
					break
				}
				region.End()
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			return lat
		}
		var never atomic.Bool
		idle := search(&never, 2*time.Second)
		var stop atomic.Bool
		got := make(chan []time.Duration)
		go func() { got <- search(&stop, time.Hour) }()
		// How long a search waits for the read lock, apart from the CPU
		// the upload takes from it: a probe takes it every millisecond.
		waits := make(chan []time.Duration)
		go func() {
			var w []time.Duration
			for !stop.Load() {
				t0 := time.Now()
				ix.mu.RLock()
				w = append(w, time.Since(t0))
				ix.mu.RUnlock()
				time.Sleep(time.Millisecond)
			}
			slices.Sort(w)
			waits <- w
		}()
		b.StartTimer()
		t0 := time.Now()
		for d := range uploadDocs {
			doc := Document{DocID: fmt.Sprintf("upload%02d", d), Title: "Upload", ContentHash: "h"}
			for i := range uploadChunks {
				doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: fmt.Sprintf("%d %s", i, text)})
				doc.Vectors = append(doc.Vectors, vecs[d*uploadChunks+i])
			}
			if err := ix.ReplaceDocument(ctx, doc); err != nil {
				b.Fatal(err)
			}
			if err := ix.Save(); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(t0)
		b.StopTimer()
		stop.Store(true)
		during := <-got
		lockWait := <-waits
		ix.Close()
		b.ReportMetric(pct(idle, 50), "search-p50-ms-idle")
		b.ReportMetric(pct(idle, 99), "search-p99-ms-idle")
		b.ReportMetric(pct(during, 50), "search-p50-ms-upload")
		b.ReportMetric(pct(during, 99), "search-p99-ms-upload")
		b.ReportMetric(pct(during, 100), "search-max-ms-upload")
		b.ReportMetric(pct(during, 99)/pct(idle, 99), "p99-ratio")
		b.ReportMetric(took.Seconds(), "upload-s")
		b.ReportMetric(pct(lockWait, 99), "rlock-wait-p99-ms")
		b.ReportMetric(pct(lockWait, 100), "rlock-wait-max-ms")
		b.StartTimer()
	}
}
