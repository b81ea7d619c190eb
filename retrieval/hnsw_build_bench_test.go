package retrieval

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"ragtime/pipeline"
)

// BenchmarkHNSWBuild inserts 6,000 clustered 512-dimensional vectors (the
// hash embedder's default dimension), 8 chunks a document, into an empty
// index: the graph insertion that dominates an ingest's CPU. Run it with
// -cpu 1 to time the work rather than the parallel planning. It reports
// recall@10 (at the default search ef) of 200 held-out vectors against an
// exact scan of the same 6,000.
func BenchmarkHNSWBuild(b *testing.B) {
	const n = 6000
	vecs := clustered(rand.New(rand.NewPCG(7, 7)), n+200, 512, 60)
	exact := openExact(b, b.TempDir(), 512, true)
	fillDocs(b, exact, vecs[:n], 8)
	b.ReportAllocs()
	var ix *Index
	for b.Loop() {
		b.StopTimer()
		ix = openIndex(b, b.TempDir(), 512, true)
		b.StartTimer()
		fillDocs(b, ix, vecs[:n], 8)
	}
	b.StopTimer()
	b.ReportMetric(recallAt(b, ix, exact, vecs[n:], 10), "recall@10")
}

// pgdocsDir is where Debian's postgresql-doc-15 puts the PostgreSQL 15
// manual (scripts/ensure-pgdocs.sh installs it).
const pgdocsDir = "/usr/share/doc/postgresql-doc-15/html"

// BenchmarkHNSWBuildPGDocs builds the graph over real vectors: the hash
// embedder's (512 dimensions) of the PostgreSQL manual's chunks, as
// `ragtime ingest` makes them. Nine pages in ten are inserted in id order,
// in batches of about 128 chunks as an ingest stores them (the timed part); the chunks of every tenth page are
// the held-out queries, and the 149 labelled questions of
// bench/retrieval/pgdocs-qrels.jsonl another set. It reports recall@10 of
// each set (at the default search ef) against an exact scan of the same
// pages. It skips when the manual is not installed.
func BenchmarkHNSWBuildPGDocs(b *testing.B) {
	if _, err := os.Stat(pgdocsDir); err != nil {
		b.Skipf("the PostgreSQL manual is not installed (scripts/ensure-pgdocs.sh): %v", err)
	}
	ctx := context.Background()
	emb, err := NewHashEmbedder(512)
	if err != nil {
		b.Fatal(err)
	}
	src := openExact(b, b.TempDir(), 512, true)
	in := Ingester{Embedder: emb, Store: src}
	if _, err := in.Ingest(ctx, []string{pgdocsDir}, nil); err != nil {
		b.Fatal(err)
	}
	var docs []Document
	var held [][]float32
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range src.st.docs {
			if !yield(id) {
				return
			}
		}
	})
	for i, id := range ids {
		e := src.st.docs[id]
		doc := Document{DocID: id, Title: e.title}
		for _, s := range e.slots {
			v := src.st.vecs.vec(s)
			if i%10 == 9 {
				held = append(held, v)
				continue
			}
			doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: "x"})
			doc.Vectors = append(doc.Vectors, v)
		}
		if i%10 != 9 {
			docs = append(docs, doc)
		}
	}
	questions := pgdocsQuestions(b)
	qvecs, err := emb.Embed(ctx, questions)
	if err != nil {
		b.Fatal(err)
	}
	exact := openExact(b, b.TempDir(), 512, true)
	for _, d := range docs {
		if err := exact.ReplaceDocument(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	var ix *Index
	for b.Loop() {
		b.StopTimer()
		ix = openIndex(b, b.TempDir(), 512, true)
		b.StartTimer()
		for lo := 0; lo < len(docs); {
			// Batches of about 128 chunks, as an ingest stores them.
			hi, n := lo, 0
			for hi < len(docs) && n < 128 {
				n += len(docs[hi].Chunks)
				hi++
			}
			if err := ix.ReplaceDocuments(ctx, docs[lo:hi]); err != nil {
				b.Fatal(err)
			}
			lo = hi
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(ix.Len()), "chunks")
	b.ReportMetric(recallAt(b, ix, exact, held, 10), "recall@10-heldout")
	b.ReportMetric(recallAt(b, ix, exact, qvecs, 10), "recall@10-questions")
}

// pgdocsQuestions reads the labelled questions over the manual.
func pgdocsQuestions(t testing.TB) []string {
	t.Helper()
	f, err := os.Open("../bench/retrieval/pgdocs-qrels.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var q struct {
			Question string `json:"question"`
		}
		if err := json.Unmarshal([]byte(line), &q); err != nil {
			t.Fatal(fmt.Errorf("reading the labelled questions: %w", err))
		}
		out = append(out, q.Question)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
