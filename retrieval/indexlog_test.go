package retrieval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"ragtime/pipeline"
)

// logFixture writes n small documents (one log record each) into a fresh
// index and returns the data dir, the log's bytes and the end offset of
// each record.
func logFixture(t *testing.T, n int) (string, []byte, []int64) {
	t.Helper()
	dir := t.TempDir()
	w := openIndexOpts(t, dir, IndexOptions{Dimension: 4, Embedder: "test", Writable: true, CompactAfter: -1})
	var ends []int64
	for d := range n {
		doc := Document{DocID: fmt.Sprintf("doc%d", d), Title: "T", ContentHash: "h",
			Chunks: []pipeline.Chunk{{Text: fmt.Sprintf("text %d", d)}}, Vectors: [][]float32{{1, float32(d), 0, 1}}}
		if err := w.ReplaceDocument(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, w.log.size)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, indexDirName, logFileName))
	if err != nil {
		t.Fatal(err)
	}
	return dir, good, ends
}

// TestLogCorruptionIsNamed flips every byte of a log in turn: each open,
// read-only or writable, must fail with ErrCorrupt naming the log file
// (every byte is under a checksum: the header's, a record length's or a
// payload's), and never come up with a document missing or changed.
func TestLogCorruptionIsNamed(t *testing.T) {
	t.Parallel()
	dir, good, _ := logFixture(t, 3)
	path := filepath.Join(dir, indexDirName, logFileName)
	for i := range good {
		bad := slices.Clone(good)
		bad[i] ^= 0x10
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, writable := range []bool{false, true} {
			ix, err := OpenIndex(dir, IndexOptions{Dimension: 4, Embedder: "test", Writable: writable})
			if err == nil {
				ix.Close()
				t.Fatalf("byte %d flipped: opened (writable %v) without error", i, writable)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("byte %d flipped: err = %v, want ErrCorrupt naming %s", i, err, path)
			}
		}
	}
}

// TestLogTornTail cuts the log at every length past its header, and pads
// it with zeros (what a power loss can leave): the index opens with the
// records that are whole, the writer cuts the rest off and appends after
// them.
func TestLogTornTail(t *testing.T) {
	t.Parallel()
	dir, good, ends := logFixture(t, 3)
	path := filepath.Join(dir, indexDirName, logFileName)
	header := int(ends[0]) - (int(ends[1]) - int(ends[0])) // records are the same size
	type variant struct {
		name    string
		content []byte
		whole   int // records expected
	}
	var vs []variant
	for n := header; n <= len(good); n++ {
		whole := 0
		for _, e := range ends {
			if int64(n) >= e {
				whole++
			}
		}
		vs = append(vs, variant{fmt.Sprintf("cut to %d bytes", n), good[:n], whole})
	}
	vs = append(vs, variant{"zero padded", append(slices.Clone(good), make([]byte, 100)...), 3})
	vs = append(vs, variant{"cut then zero padded", append(slices.Clone(good[:ends[1]]), make([]byte, 30)...), 2})
	for _, v := range vs {
		if err := os.WriteFile(path, v.content, 0o644); err != nil {
			t.Fatal(err)
		}
		rd, err := OpenIndex(dir, IndexOptions{Dimension: 4, Embedder: "test"})
		if err != nil {
			t.Fatalf("%s: read-only open: %v", v.name, err)
		}
		if len(rd.Documents()) != v.whole {
			t.Fatalf("%s: reader sees %d documents, want %d", v.name, len(rd.Documents()), v.whole)
		}
		rd.Close()
		var logged strings.Builder
		w, err := OpenIndex(dir, IndexOptions{Dimension: 4, Embedder: "test", Writable: true,
			Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if err != nil {
			t.Fatalf("%s: writable open: %v", v.name, err)
		}
		end := header
		if v.whole > 0 {
			end = int(ends[v.whole-1])
		}
		torn := len(v.content) > end
		if torn != strings.Contains(logged.String(), "dropped an interrupted record") {
			t.Errorf("%s: log says %q", v.name, logged.String())
		}
		err = w.ReplaceDocument(context.Background(), Document{DocID: "after", Chunks: []pipeline.Chunk{{Text: "x"}}, Vectors: [][]float32{{0, 0, 1, 0}}})
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		again := openIndex(t, dir, 4, false)
		if _, ok := again.DocumentHash("after"); !ok || len(again.Documents()) != v.whole+1 {
			t.Fatalf("%s: after a write past the cut: %d documents", v.name, len(again.Documents()))
		}
		again.Close()
	}
	if err := os.WriteFile(path, good[:header-1], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenIndex(dir, IndexOptions{Dimension: 4, Embedder: "test"}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("log cut inside its header (never written in place): err = %v, want ErrCorrupt", err)
	}
}

// TestOpenMigratesOldIndex opens an index written by ragtime before the
// log existed (testdata/v1index: snapshot generation 4 and its graph, made
// by that version's code), with a temporary file its interrupted save left.
func TestOpenMigratesOldIndex(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/v1index")); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(dir, indexDirName, "embedded.idx.12345.tmp")
	if err := os.WriteFile(stray, []byte("half a save"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	w := openIndexOpts(t, dir, IndexOptions{Dimension: 8, Embedder: "test", Writable: true,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if _, err := os.Stat(stray); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the leftover temporary file survived the open: %v", err)
	}
	// The old index has no lexical index file: the writer saves the one
	// it rebuilt.
	for _, want := range []string{"migrating the index", "removed temporary files", `lexical="rebuilt and saved: no lexical index file"`} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("no %q in the log: %s", want, logged.String())
		}
	}
	if strings.Contains(logged.String(), "rebuilding the index's HNSW graph") {
		t.Errorf("the old graph file was not used: %s", logged.String())
	}
	check := func(ix *Index, docs int) {
		t.Helper()
		if got := len(ix.Documents()); got != docs || ix.Len() != 1+2+3+4+docs-4 {
			t.Fatalf("%d documents, %d chunks", got, ix.Len())
		}
		for d := range 4 {
			chunks := docText(t, ix, fmt.Sprintf("old-%d", d))
			if len(chunks) != d+1 || chunks[d].Text != fmt.Sprintf("old doc %d chunk %d", d, d) || chunks[0].Metadata["k"] != fmt.Sprint(d) {
				t.Fatalf("old-%d = %+v", d, chunks)
			}
		}
		q := []float32{0, 0, 0.5, 1, 0, 0, 0, 0} // old-3 chunk 0
		hits, err := ix.Search(context.Background(), q, 1, pipeline.Filter{})
		if err != nil || len(hits) != 1 || hits[0].ID != "old-3#0" {
			t.Fatalf("search = %v, %v", hits, err)
		}
	}
	check(w, 4)
	if w.Generation() != 4 {
		t.Errorf("generation %d, want the old file's 4", w.Generation())
	}
	if err := w.ReplaceDocument(context.Background(), Document{DocID: "new", Chunks: []pipeline.Chunk{{Text: "n"}}, Vectors: [][]float32{{1, 1, 1, 1, 1, 1, 1, 1}}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	check(openIndex(t, dir, 8, false), 5)
}

// TestCompactReclaims replaces and deletes documents, then compacts: the
// dead chunks leave memory and disk, searches give the same answers, the
// log starts empty, and a fresh open reads the same index.
func TestCompactReclaims(t *testing.T) {
	t.Parallel()
	const dim = 16
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(21, 22))
	w := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1})
	var all map[string][]float32
	for range 4 { // every document replaced three times
		all = fillFixed(t, w, r, 100, dim)
	}
	for id := range all {
		if strings.HasPrefix(id, "doc7#") || strings.HasPrefix(id, "doc8#") {
			delete(all, id)
		}
	}
	w.DeleteDocument(context.Background(), "doc7")
	w.DeleteDocument(context.Background(), "doc8")
	before, _ := w.DiskSize()
	slotsBefore := len(w.st.alive)
	st, err := w.Compact(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Reclaimed != slotsBefore-len(all) || len(w.st.alive) != len(all) || w.st.live != len(all) {
		t.Errorf("reclaimed %d (%d slots before, %d live), %d slots after", st.Reclaimed, slotsBefore, len(all), len(w.st.alive))
	}
	after, _ := w.DiskSize()
	snap, err := os.Stat(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.BytesBefore != before || st.BytesAfter != after || snap.Size() >= before/3 {
		t.Errorf("on disk %d bytes of log → a %d-byte snapshot (stats %+v)", before, snap.Size(), st)
	}
	if w.log.size != w.log.base {
		t.Errorf("log holds %d bytes after compaction", w.log.size-w.log.base)
	}
	for range 5 {
		q := randomVector(r, dim)
		got, err := w.Search(context.Background(), q, 10, pipeline.Filter{Metadata: map[string]string{"parity": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, got, bruteForce(all, q, 10, func(id string) bool {
			var d int
			fmt.Sscanf(id, "doc%d", &d)
			return d%2 == 1
		}))
	}
	docs := w.Documents()
	w.Close()
	checkPersisted(t, dir, dim, r, all, docs)
}

// TestBackgroundCompaction lets the log pass CompactAfter during writes:
// a compaction runs on its own, and writes and searches go on meanwhile.
func TestBackgroundCompaction(t *testing.T) {
	t.Parallel()
	const dim = 8
	dir := t.TempDir()
	logged := &syncWriter{w: &strings.Builder{}}
	w, err := OpenIndex(dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: 2 << 10,
		Logger: slog.New(slog.NewTextHandler(logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 9))
	all := map[string][]float32{}
	for range 5 {
		all = fillFixed(t, w, r, 30, dim)
		if _, err := w.Search(context.Background(), randomVector(r, dim), 3, pipeline.Filter{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil { // waits for a compaction under way
		t.Fatal(err)
	}
	if w.Generation() == 0 || !strings.Contains(logged.String(), "compacted the index") {
		t.Fatalf("no background compaction: generation %d, log %s", w.Generation(), logged.String())
	}
	rd := openIndex(t, dir, dim, false)
	if rd.Len() != len(all) || rd.Generation() != w.Generation() {
		t.Errorf("reopened: %d chunks, generation %d; want %d, %d", rd.Len(), rd.Generation(), len(all), w.Generation())
	}
}

// fillFixed stores documents doc0…doc<docs-1> of 1 to 5 random chunks each
// (metadata "parity" as fillRandom's), replacing earlier versions, and
// returns every chunk's id and raw vector.
func fillFixed(t testing.TB, ix *Index, r *rand.Rand, docs, dim int) map[string][]float32 {
	t.Helper()
	all := map[string][]float32{}
	for d := range docs {
		doc := Document{DocID: fmt.Sprintf("doc%d", d), Title: fmt.Sprintf("Doc %d", d), ContentHash: "h"}
		for i := range 1 + r.IntN(5) {
			v := randomVector(r, dim)
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{
				Text:     fmt.Sprintf("chunk %d of doc %d", i, d),
				Metadata: map[string]string{"parity": fmt.Sprint(d % 2)},
			})
			doc.Vectors = append(doc.Vectors, v)
			all[ChunkID(doc.DocID, i)] = v
		}
		if err := ix.ReplaceDocument(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// syncWriter serialises writes to w (a background compaction logs from
// its own goroutine).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.w)
}

// TestCompactionCutBetweenRenames builds, file by file, what a crash
// between a compaction's renames leaves (the crash test hits these windows
// only now and then): the new graph beside the old snapshot and log, and
// the new snapshot and graph beside the old log. Both open with every
// document, saying what they repaired.
func TestCompactionCutBetweenRenames(t *testing.T) {
	t.Parallel()
	const dim = 8
	dir := t.TempDir()
	idx := filepath.Join(dir, indexDirName)
	r := rand.New(rand.NewPCG(4, 4))
	w := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1})
	fillFixed(t, w, r, 20, dim)
	if _, err := w.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	for d := 20; d < 30; d++ { // generation 1's log: ten more documents
		doc := Document{DocID: fmt.Sprintf("doc%d", d), Chunks: []pipeline.Chunk{{Text: "t"}}, Vectors: [][]float32{randomVector(r, dim)}}
		if err := w.ReplaceDocument(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Save(); err != nil {
		t.Fatal(err)
	}
	old := map[string][]byte{}
	for _, name := range []string{indexFileName, graphFileName, logFileName} {
		old[name], _ = os.ReadFile(filepath.Join(idx, name))
	}
	if _, err := w.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := w.Documents()
	w.Close()
	cur := map[string][]byte{}
	for _, name := range []string{indexFileName, graphFileName, logFileName} {
		cur[name], _ = os.ReadFile(filepath.Join(idx, name))
	}
	for _, tc := range []struct {
		name   string
		files  map[string][]byte
		logged string
	}{
		{"cut after the graph's rename", map[string][]byte{indexFileName: old[indexFileName], graphFileName: cur[graphFileName], logFileName: old[logFileName]},
			"rebuilding the index's HNSW graph"},
		{"cut after the snapshot's rename", map[string][]byte{indexFileName: cur[indexFileName], graphFileName: cur[graphFileName], logFileName: old[logFileName]},
			"replacing an index log the last compaction had folded"},
	} {
		for name, b := range tc.files {
			if err := os.WriteFile(filepath.Join(idx, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		rd := openIndex(t, dir, dim, false) // a reader copes without repairing
		if got := rd.Documents(); !slices.Equal(got, want) {
			t.Errorf("%s: the reader sees %d documents, want %d", tc.name, len(got), len(want))
		}
		rd.Close()
		var logged strings.Builder
		w := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1,
			Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if got := w.Documents(); !slices.Equal(got, want) {
			t.Errorf("%s: the writer sees %d documents, want %d", tc.name, len(got), len(want))
		}
		if !strings.Contains(logged.String(), tc.logged) {
			t.Errorf("%s: no %q in the log: %s", tc.name, tc.logged, logged.String())
		}
		w.Close()
		if got := openIndex(t, dir, dim, false).Documents(); !slices.Equal(got, want) {
			t.Errorf("%s: after the writer's repair %d documents, want %d", tc.name, len(got), len(want))
		}
	}
}

func TestCompactIfLogOver(t *testing.T) {
	t.Parallel()
	w := openIndexOpts(t, t.TempDir(), IndexOptions{Dimension: 8, Embedder: "test", Writable: true, CompactAfter: -1})
	fillFixed(t, w, rand.New(rand.NewPCG(2, 3)), 10, 8)
	logged := w.log.size - w.log.base
	if _, did, err := w.CompactIfLogOver(context.Background(), logged); did || err != nil {
		t.Errorf("compacted a log of %d bytes with a threshold of as many (%v)", logged, err)
	}
	if st, did, err := w.CompactIfLogOver(context.Background(), logged-1); !did || err != nil || st.Generation != 1 || st.LogBytes != logged {
		t.Errorf("below the log's size: compacted %v, %+v, %v", did, st, err)
	}
	rd := openIndex(t, t.TempDir(), 8, false)
	if _, _, err := rd.CompactIfLogOver(context.Background(), 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only: %v", err)
	}
}

// TestSavesShareAnFsync: writers that append while an fsync runs, then
// Save, are covered by the next fsync, one for all of them (a group
// commit), and each Save returns only once its writer's record is synced.
func TestSavesShareAnFsync(t *testing.T) {
	t.Parallel()
	const writers = 8
	ix := openIndexOpts(t, t.TempDir(), IndexOptions{Dimension: 8, Embedder: "test", Writable: true, CompactAfter: -1})
	putSaved(t, ix, "first")
	l := ix.log
	l.syncMu.Lock() // an fsync in progress
	before := l.syncs
	var appended, saved sync.WaitGroup
	ends := make([]int64, writers)
	errs := make([]error, writers)
	for w := range writers {
		appended.Add(1)
		saved.Add(1)
		go func() {
			defer saved.Done()
			err := ix.ReplaceDocument(context.Background(), Document{DocID: fmt.Sprintf("w%d", w),
				Chunks: []pipeline.Chunk{{Text: "x"}}, Vectors: [][]float32{{1, 2, 3, 4, 5, 6, 7, 8}}})
			ends[w] = l.written.Load() // at least this writer's record's end
			appended.Done()
			if err == nil {
				err = ix.Save()
			}
			errs[w] = err
		}()
	}
	appended.Wait()
	l.syncMu.Unlock()
	saved.Wait()
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	for w := range writers {
		if errs[w] != nil {
			t.Fatalf("writer %d: %v", w, errs[w])
		}
		if l.synced < ends[w] {
			t.Errorf("writer %d's Save returned with the log synced to %d, its record ends at or before %d", w, l.synced, ends[w])
		}
	}
	if n := l.syncs - before; n != 1 {
		t.Errorf("%d Saves made %d fsyncs, want 1", writers, n)
	}
}
