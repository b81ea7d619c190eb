package retrieval

import (
	"context"
	"slices"
	"testing"

	"ragtime/pipeline"
)

func textDoc(id, title string, texts ...string) Document {
	d := Document{DocID: id, Title: title, ContentHash: "h"}
	for i, s := range texts {
		d.Chunks = append(d.Chunks, pipeline.Chunk{Text: s})
		v := make([]float32, 4)
		v[i%4] = 1
		d.Vectors = append(d.Vectors, v)
	}
	return d
}

func lexIDs(t *testing.T, ix *Index, q string, f pipeline.Filter) []string {
	t.Helper()
	hits, err := ix.SearchText(context.Background(), q, 10, f)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

// The lexical leg follows every write, survives a reopen (rebuilt from
// the log) and a compaction (rebuilt from the snapshot), in both the
// graph and the exact (slot-reusing) layouts.
func TestLexicalLegFollowsWrites(t *testing.T) {
	t.Parallel()
	for _, exact := range []bool{false, true} {
		dir := t.TempDir()
		ctx := context.Background()
		ix := openIndexOpts(t, dir, IndexOptions{Dimension: 4, Embedder: "test", Writable: true, Exact: exact})
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(ix.ReplaceDocument(ctx, textDoc("a", "Caching", "The cache evicts entries.", "## Eviction\nOld entries go first.")))
		must(ix.ReplaceDocument(ctx, textDoc("b", "Logging", "Logs rotate daily; entries are compressed.")))
		if got := lexIDs(t, ix, "evicting", pipeline.Filter{}); !slices.Equal(got, []string{"a#1", "a#0"}) {
			t.Fatalf("exact=%v: evicting found %v, want the heading's chunk first", exact, got)
		}
		if got := lexIDs(t, ix, "entries", pipeline.Filter{DocIDs: []string{"b"}}); !slices.Equal(got, []string{"b#0"}) {
			t.Fatalf("exact=%v: filtered search found %v", exact, got)
		}
		// Replacing a: its old words go, its new ones come.
		must(ix.ReplaceDocument(ctx, textDoc("a", "Caching", "Prefetching warms the cache.")))
		if got := lexIDs(t, ix, "eviction", pipeline.Filter{}); len(got) != 0 {
			t.Fatalf("exact=%v: the replaced text is still found: %v", exact, got)
		}
		if _, err := ix.DeleteDocument(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		must(ix.ReplaceDocument(ctx, textDoc("c", "Compression", "zstd compresses the logs")))
		check := func(ix *Index, when string) {
			t.Helper()
			if got := lexIDs(t, ix, "prefetch", pipeline.Filter{}); !slices.Equal(got, []string{"a#0"}) {
				t.Fatalf("exact=%v, %s: prefetch found %v", exact, when, got)
			}
			if got := lexIDs(t, ix, "rotate logs", pipeline.Filter{}); !slices.Equal(got, []string{"c#0"}) {
				t.Fatalf("exact=%v, %s: the deleted doc or not the new one: %v", exact, when, got)
			}
		}
		check(ix, "live")
		must(ix.Close())
		ix = openIndexOpts(t, dir, IndexOptions{Dimension: 4, Embedder: "test", Writable: true, Exact: exact})
		check(ix, "replayed")
		if _, err := ix.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		check(ix, "compacted")
		if ix.st.lex.Dead() != 0 {
			t.Errorf("exact=%v: compaction kept %d dead chunks in the lexical index", exact, ix.st.lex.Dead())
		}
		must(ix.Close())
		ix = openIndexOpts(t, dir, IndexOptions{Dimension: 4, Embedder: "test", Exact: exact})
		check(ix, "reopened from the snapshot")
	}
}
