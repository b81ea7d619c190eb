package retrieval

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"ragtime/pipeline"
)

// The store benchmarks run on a ~300 MB HNSW index: 100k chunks of 1 KB of
// text and a 512-dimensional vector (what the hash embedder makes), as
// issue 14 measured. It is built once (a few minutes) and cached under the
// system temp dir, compacted, so each benchmark starts from a snapshot,
// its graph and an empty log; the benchmarks that write copy it first.
const (
	storeBenchChunks = 100_000
	storeBenchDim    = 512
)

func storeBenchFixture(b *testing.B) string {
	b.Helper()
	dir := benchFixtureDir("store", storeBenchChunks)
	if _, err := os.Stat(filepath.Join(dir, indexDirName, graphFileName)); err == nil {
		return withLexicalFile(b, dir)
	}
	os.RemoveAll(dir)
	start := time.Now()
	ix, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(14, 300))
	vecs := clustered(r, storeBenchChunks, storeBenchDim, 100)
	text := strings.Repeat("lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 18)[:1000]
	ctx := context.Background()
	for d := 0; d*10 < len(vecs); d++ {
		doc := Document{DocID: fmt.Sprintf("doc%06d", d), Title: "Doc " + strconv.Itoa(d), ContentHash: "h"}
		for i, v := range vecs[d*10 : min(len(vecs), d*10+10)] {
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: strconv.Itoa(i) + text})
			doc.Vectors = append(doc.Vectors, v)
		}
		if err := ix.ReplaceDocument(ctx, doc); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := ix.Compact(ctx); err != nil {
		b.Fatal(err)
	}
	ix.Close()
	size, _ := dirSize(filepath.Join(dir, indexDirName))
	b.Logf("built the %d-chunk fixture (%.0f MB) in %s", storeBenchChunks, float64(size)/1e6, time.Since(start).Round(time.Second))
	return dir
}

// withLexicalFile returns the fixture dir when it has a lexical index file,
// else a copy of it (cached beside it) given one by a writer's open, which
// saves the lexical index it rebuilt: a fixture cached by an older build.
func withLexicalFile(b *testing.B, dir string) string {
	b.Helper()
	if _, err := os.Stat(filepath.Join(dir, indexDirName, lexFileName)); err == nil {
		return dir
	}
	lexDir := dir + "-lex"
	if _, err := os.Stat(filepath.Join(lexDir, indexDirName, lexFileName)); err == nil {
		return lexDir
	}
	os.RemoveAll(lexDir)
	if err := os.CopyFS(lexDir, os.DirFS(dir)); err != nil {
		b.Fatal(err)
	}
	os.Remove(filepath.Join(lexDir, indexDirName, lockFileName))
	ix, err := OpenIndex(lexDir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
	if err != nil {
		b.Fatal(err)
	}
	ix.Close()
	if _, err := os.Stat(filepath.Join(lexDir, indexDirName, lexFileName)); err != nil {
		b.Fatalf("the writer's open saved no lexical index file: %v", err)
	}
	return lexDir
}

func dirSize(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n, nil
}

// copyFixture copies the fixture's index files to a fresh data dir.
func copyFixture(b *testing.B, from string) string {
	b.Helper()
	to := b.TempDir()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		b.Fatal(err)
	}
	return to
}

// writtenBytes returns the bytes this process has passed to write calls
// (/proc/self/io wchar).
func writtenBytes(b *testing.B) int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Skipf("no /proc/self/io: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Skip("no wchar in /proc/self/io")
	return 0
}

// BenchmarkAddDocument300MB adds one 1 KB document (one chunk) to the
// ~300 MB index and makes it durable (ReplaceDocument, then Save: an fsync),
// as POST /v1/documents does. Beside ns/op it reports the p50/p99 latency
// and the bytes written per document (all the process's write calls).
func BenchmarkAddDocument300MB(b *testing.B) {
	dir := copyFixture(b, storeBenchFixture(b))
	ix, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	r := rand.New(rand.NewPCG(5, 5))
	vecs := clustered(r, 1000, storeBenchDim, 100)
	text := strings.Repeat("x", 1000)
	ctx := context.Background()
	var lat []time.Duration
	w0 := writtenBytes(b)
	i := 0
	for b.Loop() {
		t0 := time.Now()
		doc := Document{DocID: fmt.Sprintf("new%06d", i), Title: "New", ContentHash: "h",
			Chunks: []pipeline.Chunk{{Text: text}}, Vectors: [][]float32{vecs[i%len(vecs)]}}
		if err := ix.ReplaceDocument(ctx, doc); err != nil {
			b.Fatal(err)
		}
		if err := ix.Save(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		i++
	}
	written := writtenBytes(b) - w0
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(written)/float64(i), "written-B/doc")
}

// BenchmarkOpenIndex300MB measures opening the ~300 MB index read-only:
// the snapshot, its graph, and (log=…) a log of 10-chunk documents to
// replay, as after writes that did not reach the compaction threshold: an
// empty one, and one of 32 MB (DefaultCompactAfter, the most a log holds
// before a compaction folds it). Linking the logged chunks into the graph
// continues in the background after OpenIndex returns (see
// BenchmarkLinkAfterOpen300MB). Beside ns/op it reports open-s and each
// phase of the "opened the index" log line, in seconds. The bar: open-s
// ≤ 1 with the 32 MB log.
func BenchmarkOpenIndex300MB(b *testing.B) {
	fixture := storeBenchFixture(b)
	for _, logMB := range []int{0, 32} {
		b.Run(fmt.Sprintf("log=%dMB", logMB), func(b *testing.B) {
			dir := fixture
			docs := 0
			if logMB > 0 {
				dir = copyFixture(b, fixture)
				w, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
				if err != nil {
					b.Fatal(err)
				}
				r := rand.New(rand.NewPCG(7, 7))
				for ; w.log.size < int64(logMB)<<20; docs++ {
					doc := Document{DocID: fmt.Sprintf("log%05d", docs), Title: "L"}
					for _, v := range clustered(r, 10, storeBenchDim, 100) {
						doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: strings.Repeat("y", 1000)})
						doc.Vectors = append(doc.Vectors, v)
					}
					if err := w.ReplaceDocument(context.Background(), doc); err != nil {
						b.Fatal(err)
					}
				}
				w.Close()
			}
			size, _ := dirSize(filepath.Join(dir, indexDirName))
			var phases *phaseLog
			for b.Loop() {
				phases = &phaseLog{attrs: map[string]time.Duration{}}
				rd, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Logger: slog.New(phases)})
				if err != nil {
					b.Fatal(err)
				}
				if rd.Len() != storeBenchChunks+docs*10 {
					b.Fatalf("loaded %d chunks", rd.Len())
				}
				rd.Close() // stops the background linking
			}
			b.ReportMetric(float64(size)/1e6, "MB-on-disk")
			for _, k := range []string{"took", "snapshot_read", "lexical_load", "graph_read", "log_replay"} {
				name := k + "-s"
				if k == "took" {
					name = "open-s"
				}
				b.ReportMetric(phases.attrs[k].Seconds(), name)
			}
			fromFile := 0.0
			if phases.lexical == "file" {
				fromFile = 1
			}
			b.ReportMetric(fromFile, "lexical-from-file")
		})
	}
}

// phaseLog is a slog handler keeping the durations of the "opened the
// index" line.
type phaseLog struct {
	mu    sync.Mutex
	attrs map[string]time.Duration
	// lexical is how the lexical index was made.
	lexical string
}

func (h *phaseLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *phaseLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *phaseLog) WithGroup(string) slog.Handler            { return h }
func (h *phaseLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "opened the index" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindDuration {
			h.attrs[a.Key] = a.Value.Duration()
		}
		if a.Key == "lexical" {
			h.lexical = a.Value.String()
		}
		return true
	})
	return nil
}

// BenchmarkCompact300MB compacts the ~300 MB index after a tenth of its
// documents were replaced, while two goroutines search it without pause,
// and reports the compaction's duration, the bytes reclaimed, and the p99
// of those searches during the compaction beside their p99 before it.
func BenchmarkCompact300MB(b *testing.B) {
	fixture := storeBenchFixture(b)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(9, 9))
	queries := clustered(r, 256, storeBenchDim, 100)
	for b.Loop() {
		b.StopTimer()
		dir := copyFixture(b, fixture)
		ix, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
		if err != nil {
			b.Fatal(err)
		}
		vecs := clustered(r, storeBenchChunks/10, storeBenchDim, 100)
		for d := 0; d < storeBenchChunks/100; d++ { // replace a tenth of the documents
			doc := Document{DocID: fmt.Sprintf("doc%06d", d*10), Title: "R"}
			for _, v := range vecs[d*10 : d*10+10] {
				doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: strings.Repeat("z", 1000)})
				doc.Vectors = append(doc.Vectors, v)
			}
			if err := ix.ReplaceDocument(ctx, doc); err != nil {
				b.Fatal(err)
			}
		}
		search := func(stop *atomic.Bool) []time.Duration {
			var mu sync.Mutex
			var lat []time.Duration
			var wg sync.WaitGroup
			for w := range 2 {
				wg.Go(func() {
					var mine []time.Duration
					for i := w; !stop.Load() && len(mine) < 200_000; i += 2 {
						t0 := time.Now()
						if _, err := ix.Search(ctx, queries[i%len(queries)], 10, pipeline.Filter{}); err != nil {
							b.Error(err)
							return
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
			}
			wg.Wait()
			slices.Sort(lat)
			return lat
		}
		var stop atomic.Bool
		go func() { time.Sleep(time.Second); stop.Store(true) }()
		idle := search(&stop)

		stop.Store(false)
		done := make(chan []time.Duration)
		go func() { done <- search(&stop) }()
		b.StartTimer()
		st, err := ix.Compact(ctx)
		b.StopTimer()
		stop.Store(true)
		during := <-done
		if err != nil {
			b.Fatal(err)
		}
		ix.Close()
		b.ReportMetric(st.Took.Seconds(), "compact-s")
		b.ReportMetric(float64(st.BytesBefore-st.BytesAfter)/1e6, "MB-reclaimed")
		b.ReportMetric(float64(st.Reclaimed), "chunks-reclaimed")
		b.ReportMetric(float64(idle[len(idle)*99/100].Microseconds()), "search-p99-µs-idle")
		b.ReportMetric(float64(during[len(during)*99/100].Microseconds()), "search-p99-µs-compacting")
		b.ReportMetric(float64(len(during)), "searches-during")
		b.StartTimer()
	}
}

// BenchmarkLinkAfterOpen300MB measures how long the background linking of
// 10k logged chunks into the ~300 MB index's graph takes after an open, and
// the p99 of searches made meanwhile (an exact scan of the unlinked chunks
// merged with the graph's answer).
func BenchmarkLinkAfterOpen300MB(b *testing.B) {
	dir := copyFixture(b, storeBenchFixture(b))
	w, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench", Writable: true, CompactAfter: -1})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	vecs := clustered(r, 10_000, storeBenchDim, 100)
	for d := range 1000 {
		doc := Document{DocID: fmt.Sprintf("log%05d", d), Title: "L"}
		for _, v := range vecs[d*10 : d*10+10] {
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: strings.Repeat("y", 1000)})
			doc.Vectors = append(doc.Vectors, v)
		}
		if err := w.ReplaceDocument(context.Background(), doc); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	queries := clustered(r, 256, storeBenchDim, 100)
	for b.Loop() {
		start := time.Now()
		rd, err := OpenIndex(dir, IndexOptions{Dimension: storeBenchDim, Embedder: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		opened := time.Since(start)
		var lat []time.Duration
		for i := 0; ; i++ {
			rd.mu.RLock()
			left := len(rd.st.unlinked)
			rd.mu.RUnlock()
			if left == 0 {
				break
			}
			t0 := time.Now()
			if _, err := rd.Search(context.Background(), queries[i%len(queries)], 10, pipeline.Filter{}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		linked := time.Since(start)
		rd.Close()
		slices.Sort(lat)
		b.ReportMetric(opened.Seconds(), "open-s")
		b.ReportMetric(linked.Seconds(), "linked-s")
		if len(lat) > 0 {
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "search-p99-µs-linking")
		}
	}
}
