package retrieval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"ragtime/pipeline"
)

// TestWritesDuringCompaction writes and deletes documents from inside a
// compaction (its test hook runs after the freeze and again after the
// commit point, with the compaction still under way): a compaction that
// held a lock the write path needs would deadlock here. Every write made
// meanwhile must be in the compacted index, in memory (vector and lexical
// legs) and after a reopen, and the copies of the index directory taken
// before and after the commit point (what a crash there leaves) must open
// with every document, saying what they repaired.
func TestWritesDuringCompaction(t *testing.T) {
	t.Parallel()
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			t.Parallel()
			const dim = 8
			dir := t.TempDir()
			r := rand.New(rand.NewPCG(8, 8))
			w := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1, Exact: exact})
			fillFixed(t, w, r, 40, dim)
			ctx := context.Background()
			// A snapshot of its own before, so that the files the tested
			// compaction renames before its commit point meet an old one.
			if _, err := w.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			put := func(id string) Document {
				doc := Document{DocID: id, Title: id, ContentHash: "h" + id,
					Chunks:  []pipeline.Chunk{{Text: "during " + id}, {Text: "second " + id}},
					Vectors: [][]float32{randomVector(r, dim), randomVector(r, dim)}}
				if err := w.ReplaceDocument(ctx, doc); err != nil {
					t.Fatal(err)
				}
				return doc
			}
			written := map[string]Document{}
			copies := map[string]string{}
			w.hook = func(step string) error {
				switch step {
				case "frozen": // replace some, delete some, add some
					for i := range 5 {
						written[fmt.Sprintf("doc%d", i)] = put(fmt.Sprintf("doc%d", i))
					}
					for i := 5; i < 10; i++ {
						if _, err := w.DeleteDocument(ctx, fmt.Sprintf("doc%d", i)); err != nil {
							t.Fatal(err)
						}
					}
					written["new0"] = put("new0")
				case "commit":
					if err := w.Save(); err != nil {
						t.Fatal(err)
					}
					copies["before the commit point"] = copyIndexDir(t, dir)
				case "lexical renamed":
					copies["between the lexical file and the snapshot"] = copyIndexDir(t, dir)
				case "committed":
					written["new1"] = put("new1")
					if err := w.Save(); err != nil {
						t.Fatal(err)
					}
					copies["after the commit point"] = copyIndexDir(t, dir)
				}
				return nil
			}
			if _, err := w.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			w.hook = nil
			written["new2"] = put("new2")
			if err := w.Save(); err != nil {
				t.Fatal(err)
			}
			want := w.Documents()
			if len(want) != 40-5+3 {
				t.Fatalf("%d documents after the compaction, want %d", len(want), 40-5+3)
			}
			checkWritten(t, "in memory", w, written)
			w.Close()
			if _, err := os.Stat(filepath.Join(dir, indexDirName, nextLogFileName)); err == nil {
				t.Errorf("the log segment is left after the compaction")
			}
			rd := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Exact: exact})
			if got := rd.Documents(); !slices.Equal(got, want) {
				t.Errorf("reopened: %d documents, want %d", len(got), len(want))
			}
			checkWritten(t, "reopened", rd, written)
			delete(written, "new2")
			for name, logged := range map[string]string{
				"before the commit point":                   "appended the log segment of a compaction a crash interrupted",
				"between the lexical file and the snapshot": "appended the log segment of a compaction a crash interrupted",
				"after the commit point":                    "finished a compaction a crash interrupted after its commit point",
			} {
				cdir := copies[name]
				// A reader opens it as it is, without the segment's
				// records (they reach it once the writer repairs).
				openIndexOpts(t, cdir, IndexOptions{Dimension: dim, Embedder: "test", Exact: exact}).Close()
				var out strings.Builder
				cw := openIndexOpts(t, cdir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1, Exact: exact,
					Logger: slog.New(slog.NewTextHandler(&out, nil))})
				if !strings.Contains(out.String(), logged) {
					t.Errorf("%s: no %q in the log: %s", name, logged, out.String())
				}
				for _, phase := range []string{"opened the index", "snapshot_read=", "lexical=", "lexical_load=", "graph_read=", "log_replay=", "segment_replay="} {
					if !strings.Contains(out.String(), phase) {
						t.Errorf("%s: no %q in the open's log line: %s", name, phase, out.String())
					}
				}
				// The lexical index file of the next generation beside the
				// old snapshot is rebuilt (and saved); after the commit
				// point it is loaded.
				lexWant := "lexical=file"
				if name == "between the lexical file and the snapshot" {
					lexWant = "lexical=\"rebuilt and saved: lexical index file is stale"
				}
				if !strings.Contains(out.String(), lexWant) {
					t.Errorf("%s: no %s in the open's log line: %s", name, lexWant, out.String())
				}
				got := cw.Documents()
				cw.Close()
				before := name != "after the commit point"
				n := len(want) - 1 // new2 came later
				if before {
					n-- // and new1
				}
				if len(got) != n {
					t.Errorf("%s: %d documents, want %d", name, len(got), n)
				}
				if _, err := os.Stat(filepath.Join(cdir, indexDirName, nextLogFileName)); err == nil {
					t.Errorf("%s: the log segment is left after the writer's open", name)
				}
				var rout strings.Builder
				rd := openIndexOpts(t, cdir, IndexOptions{Dimension: dim, Embedder: "test", Exact: exact,
					Logger: slog.New(slog.NewTextHandler(&rout, nil))})
				if !strings.Contains(rout.String(), "lexical=file") {
					t.Errorf("%s: the open after the writer's repair did not load the lexical index file: %s", name, rout.String())
				}
				written := maps.Clone(written)
				if before {
					delete(written, "new1") // written after the copy
				}
				for id, doc := range written {
					if doc.DocID == "" {
						continue
					}
					checkWritten(t, name, rd, map[string]Document{id: doc})
				}
				rd.Close()
			}
		})
	}
}

// TestFailedCompactionKeepsWrites makes a compaction fail just before its
// commit point, after writes went to its log segment: they must be back in
// the log, the segment gone, and the next compaction must succeed.
func TestFailedCompactionKeepsWrites(t *testing.T) {
	t.Parallel()
	const dim = 8
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(9, 9))
	w := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1})
	fillFixed(t, w, r, 20, dim)
	ctx := context.Background()
	doc := Document{DocID: "during", Chunks: []pipeline.Chunk{{Text: "written during the compaction"}}, Vectors: [][]float32{randomVector(r, dim)}}
	boom := errors.New("disk full")
	w.hook = func(step string) error {
		switch step {
		case "frozen":
			if err := w.ReplaceDocument(ctx, doc); err != nil {
				t.Fatal(err)
			}
		case "commit":
			return boom
		}
		return nil
	}
	if _, err := w.Compact(ctx); !errors.Is(err, boom) {
		t.Fatalf("compaction error %v, want %v", err, boom)
	}
	w.hook = nil
	if w.Generation() != 0 {
		t.Errorf("generation %d after a failed compaction", w.Generation())
	}
	if _, err := os.Stat(filepath.Join(dir, indexDirName, nextLogFileName)); err == nil {
		t.Errorf("the log segment is left after a failed compaction")
	}
	if err := w.Save(); err != nil {
		t.Fatal(err)
	}
	rd := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test"})
	checkWritten(t, "reopened after the failure", rd, map[string]Document{"during": doc})
	rd.Close()
	if _, err := w.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	checkWritten(t, "compacted again", w, map[string]Document{"during": doc})
}

// copyIndexDir copies dir's index files to a fresh data dir.
func copyIndexDir(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	if err := os.CopyFS(filepath.Join(to, indexDirName), os.DirFS(filepath.Join(dir, indexDirName))); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(to, indexDirName, lockFileName))
	return to
}

// checkWritten checks that each document of written is in ix with its
// chunks, found by the vector and the lexical legs.
func checkWritten(t *testing.T, when string, ix *Index, written map[string]Document) {
	t.Helper()
	ctx := context.Background()
	for id, doc := range written {
		if h, ok := ix.DocumentHash(id); !ok || h != doc.ContentHash {
			t.Errorf("%s: %s has hash %q (%v), want %q", when, id, h, ok, doc.ContentHash)
			continue
		}
		for i, v := range doc.Vectors {
			hits, err := ix.Search(ctx, v, 1, pipeline.Filter{})
			if err != nil || len(hits) != 1 || hits[0].ID != ChunkID(id, i) {
				t.Errorf("%s: searching for %s chunk %d found %v (%v)", when, id, i, hits, err)
			}
			lex, err := ix.SearchText(ctx, doc.Chunks[i].Text, 1, pipeline.Filter{})
			if err != nil || len(lex) != 1 || lex[0].ID != ChunkID(id, i) {
				t.Errorf("%s: the lexical leg finds %v for %s chunk %d (%v)", when, lex, id, i, err)
			}
		}
	}
}

// TestCompactedStateIsTheSnapshots checks that the state a compaction
// swaps in, built from the frozen state rather than read from the new
// files, is the one those files open as: the same documents, chunks,
// vectors, lexical index and graph, with and without a graph, after
// replacements and deletions left dead slots behind.
func TestCompactedStateIsTheSnapshots(t *testing.T) {
	t.Parallel()
	const dim = 16
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			opts := IndexOptions{Dimension: dim, Embedder: "test", Writable: true, Exact: exact}
			w := openIndexOpts(t, dir, opts)
			r := rand.New(rand.NewPCG(5, 6))
			fillRandom(t, w, r, 300, dim)
			ctx := context.Background()
			for d := 0; d < 40; d += 3 {
				if _, err := w.DeleteDocument(ctx, fmt.Sprintf("doc%d", d)); err != nil {
					t.Fatal(err)
				}
			}
			// A replacement with no metadata, and one whose chunk ids the
			// caller gave in another form: the file keeps neither.
			for d := 1; d < 40; d += 3 {
				doc := Document{DocID: fmt.Sprintf("doc%d", d), Title: "Replaced", ContentHash: "h2"}
				for i := range 2 {
					doc.Chunks = append(doc.Chunks, pipeline.Chunk{ID: "given", Text: fmt.Sprintf("replaced chunk %d", i),
						Metadata: map[string]string{}})
					doc.Vectors = append(doc.Vectors, randomVector(r, dim))
				}
				if err := w.ReplaceDocument(ctx, doc); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			rd := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Exact: exact})
			got, want := w.st, rd.st
			if !reflect.DeepEqual(got.docs, want.docs) {
				t.Error("documents differ from the snapshot's")
			}
			if !reflect.DeepEqual(got.chunks, want.chunks) {
				for i := range min(len(got.chunks), len(want.chunks)) {
					if !reflect.DeepEqual(got.chunks[i], want.chunks[i]) {
						t.Fatalf("slot %d holds %+v, the snapshot %+v", i, got.chunks[i], want.chunks[i])
					}
				}
				t.Fatalf("%d chunks, the snapshot %d", len(got.chunks), len(want.chunks))
			}
			if !slices.Equal(slabFloats(&got.vecs), slabFloats(&want.vecs)) || !slices.Equal(got.alive, want.alive) || got.live != want.live {
				t.Error("vectors or liveness differ from the snapshot's")
			}
			if got.sum != want.sum || got.sum == 0 {
				t.Errorf("checksum %08x, the snapshot's %08x", got.sum, want.sum)
			}
			if !slices.Equal(got.lexID, want.lexID) || !reflect.DeepEqual(got.lex, want.lex) {
				t.Error("lexical index differs from the snapshot's")
			}
			// The compaction renumbers the live lexical index rather than
			// analysing the chunks again: the same index.
			if !reflect.DeepEqual(got.lex, lexicalOf(got.chunks)) {
				t.Error("the renumbered lexical index differs from the chunks' analysis")
			}
			if (got.graph == nil) != exact || !sameGraph(got.graph, want.graph) {
				t.Errorf("graph %v differs from the snapshot's %v", got.graph != nil, want.graph != nil)
			}
			if w.snap != rd.snap {
				t.Errorf("snapshot identity %+v, the file's %+v", w.snap, rd.snap)
			}
		})
	}
}

// sameGraph reports whether a and b hold the same nodes and links (the
// pages either has spare do not count).
func sameGraph(a, b *graph) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.entry != b.entry || a.top != b.top || a.l0.n != b.l0.n || !reflect.DeepEqual(a.upper, b.upper) {
		return false
	}
	for s := range int32(a.l0.n) {
		if !slices.Equal(a.l0.ids(s), b.l0.ids(s)) || !slices.Equal(a.l0.distances(s), b.l0.distances(s)) {
			return false
		}
	}
	return true
}
