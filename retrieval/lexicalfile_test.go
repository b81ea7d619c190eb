package retrieval

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"ragtime/lexical"
	"ragtime/pipeline"
)

// TestLexicalFileLoadsOrRebuilds opens an index whose lexical index file
// is sound, missing, damaged, of an older snapshot, or of another analyzer
// version: the first is loaded, the others rebuilt from the chunks' text
// with the reason in the open's log line, and every open gives the same
// lexical search results, scores and corpus statistics, the log's
// documents (replacing and deleting some of the snapshot's) included. A
// writer's open saves the rebuilt file, which the next open loads.
func TestLexicalFileLoadsOrRebuilds(t *testing.T) {
	t.Parallel()
	const dim = 8
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(3, 4))
	w := openIndexOpts(t, dir, IndexOptions{Dimension: dim, Embedder: "test", Writable: true, CompactAfter: -1})
	ctx := context.Background()
	words := strings.Fields("prefill decode token cache server reconnecting replica vacuum index page checkpoint wal")
	put := func(id string, n int) {
		doc := Document{DocID: id, Title: "Title " + words[r.IntN(len(words))], ContentHash: "h" + id}
		for i := range n {
			var text []string
			for range 5 + r.IntN(20) {
				text = append(text, words[r.IntN(len(words))])
			}
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: fmt.Sprintf("# Part %d\n%s", i, strings.Join(text, " "))})
			doc.Vectors = append(doc.Vectors, randomVector(r, dim))
		}
		if err := w.ReplaceDocument(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	for d := range 60 {
		put(fmt.Sprintf("doc%02d", d), 1+r.IntN(4))
	}
	if _, err := w.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	lexPath := func(d string) string { return filepath.Join(d, indexDirName, lexFileName) }
	older, err := os.ReadFile(lexPath(dir))
	if err != nil {
		t.Fatalf("no lexical index file after a compaction: %v", err)
	}
	for d := range 20 { // replaced in the next snapshot
		put(fmt.Sprintf("doc%02d", d), 1+r.IntN(4))
	}
	if _, err := w.Compact(ctx); err != nil {
		t.Fatal(err)
	}
	for d := 10; d < 30; d++ { // in the log: replacements, deletions, new documents
		put(fmt.Sprintf("doc%02d", d), 1+r.IntN(4))
	}
	for d := 30; d < 35; d++ {
		if _, err := w.DeleteDocument(ctx, fmt.Sprintf("doc%02d", d)); err != nil {
			t.Fatal(err)
		}
	}
	for d := range 10 {
		put(fmt.Sprintf("new%02d", d), 2)
	}
	if err := w.Save(); err != nil {
		t.Fatal(err)
	}
	w.Close()

	type result struct {
		Hits  [][]string
		Stats []float64
	}
	open := func(d string, writable bool) (result, string) {
		t.Helper()
		var out strings.Builder
		ix := openIndexOpts(t, d, IndexOptions{Dimension: dim, Embedder: "test", Writable: writable, CompactAfter: -1,
			Logger: slog.New(slog.NewTextHandler(&out, nil))})
		defer ix.Close()
		var res result
		for _, q := range append(words, "title part", "reconnect prefill", "wal checkpoint vacuum", "page 3") {
			hits, err := ix.SearchText(ctx, q, 50, pipeline.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range hits {
				got = append(got, fmt.Sprintf("%s %v", h.ID, h.Score))
			}
			res.Hits = append(res.Hits, got)
			res.Stats = append(res.Stats, float64(ix.DocFreq(lexical.Stem(q))))
		}
		res.Stats = append(res.Stats, float64(ix.Docs()), ix.AvgLen())
		return res, out.String()
	}
	want, logged := open(dir, false)
	if !strings.Contains(logged, "lexical=file") {
		t.Fatalf("the lexical index file was not loaded: %s", logged)
	}
	if len(want.Hits[0]) == 0 {
		t.Fatalf("nothing found: %+v", want)
	}

	// A file of another analyzer version: a sound file with the version
	// after the analyzer's name changed (and its checksum redone).
	data, err := os.ReadFile(lexPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	otherVersion := append([]byte(nil), data...)
	at := 8 + 8 + 4 + 4 + len(lexical.Analyzer)
	binary.LittleEndian.PutUint32(otherVersion[at:], lexical.AnalyzerVersion+1)
	body := otherVersion[:len(otherVersion)-4]
	binary.LittleEndian.PutUint32(otherVersion[len(body):], crc32.Checksum(body, castagnoli))
	damaged := append([]byte(nil), data...)
	damaged[len(damaged)/2] ^= 0x10

	for _, c := range []struct {
		name   string
		file   []byte // nil: no file
		reason string
	}{
		{"missing", nil, "no lexical index file"},
		{"damaged", damaged, "lexical index file is corrupt: checksum mismatch"},
		{"an older snapshot's", older, "lexical index file is stale: made from generation 1"},
		{"another analyzer version's", otherVersion, fmt.Sprintf("version %d", lexical.AnalyzerVersion+1)},
	} {
		cdir := copyIndexDir(t, dir)
		os.Remove(lexPath(cdir))
		if c.file != nil {
			if err := os.WriteFile(lexPath(cdir), c.file, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, logged := open(cdir, false)
		if !strings.Contains(logged, `lexical="rebuilt: `) || !strings.Contains(logged, c.reason) {
			t.Errorf("%s file: no rebuild saying %q in the log: %s", c.name, c.reason, logged)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s file: the rebuilt index searches differently:\n got %v\nwant %v", c.name, got, want)
		}
		// A writer saves the rebuilt index; the next open loads it.
		if got, logged = open(cdir, true); !strings.Contains(logged, `lexical="rebuilt and saved: `) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s file: the writer's open did not save the rebuilt index or searches differently: %s", c.name, logged)
		}
		if got, logged = open(cdir, false); !strings.Contains(logged, "lexical=file") || !reflect.DeepEqual(got, want) {
			t.Errorf("%s file: the saved index was not loaded or searches differently: %s", c.name, logged)
		}
	}
}
