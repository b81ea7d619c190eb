package retrieval

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime/lexical"
	"ragtime/pipeline"
)

// BenchmarkHybridSearch measures the search stage of a hybrid retrieval
// on the embedded store as serve runs it: the vector leg (HNSW, hash
// embedder at 512 dimensions) and the BM25 leg at once, 50 deep each, then
// reciprocal rank fusion to the top 10. The corpus is lexical's synthetic
// one (10k chunks of 150 Zipf-drawn words, ten chunks a document). It
// reports p50 and p99 of the whole, and p50 of each leg alone.
func BenchmarkHybridSearch(b *testing.B) {
	const n, dim, depth = 10_000, 512, 50
	emb, err := NewHashEmbedder(dim)
	if err != nil {
		b.Fatal(err)
	}
	ix := openIndexOpts(b, b.TempDir(), IndexOptions{Dimension: dim, Embedder: "hash", Writable: true, CompactAfter: -1})
	ctx := context.Background()
	var doc Document
	queries := lexical.SyntheticCorpus(n, func(words []string) {
		text := strings.Join(words, " ")
		doc.Chunks = append(doc.Chunks, pipeline.Chunk{Text: text})
		if len(doc.Chunks) == 10 {
			texts := make([]string, len(doc.Chunks))
			for i, c := range doc.Chunks {
				texts[i] = c.Text
			}
			vecs, err := emb.Embed(ctx, texts)
			if err != nil {
				b.Fatal(err)
			}
			doc.DocID, doc.Title, doc.Vectors = fmt.Sprintf("doc%d", ix.Len()/10), "synthetic", vecs
			if err := ix.ReplaceDocument(ctx, doc); err != nil {
				b.Fatal(err)
			}
			doc = Document{}
		}
	})
	texts := make([]string, len(queries))
	for i, q := range queries {
		texts[i] = strings.Join(q, " ")
	}
	qvecs, err := emb.Embed(ctx, texts)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var took, vtook, ltook []time.Duration
	i := 0
	for b.Loop() {
		q := i % len(texts)
		i++
		start := time.Now()
		var vh, lh []pipeline.Hit
		var verr, lerr error
		var vdur time.Duration
		var wg sync.WaitGroup
		wg.Go(func() {
			s := time.Now()
			vh, verr = ix.Search(ctx, qvecs[q], depth, pipeline.Filter{})
			vdur = time.Since(s)
		})
		s := time.Now()
		lh, lerr = ix.SearchText(ctx, texts[q], depth, pipeline.Filter{})
		ldur := time.Since(s)
		wg.Wait()
		if verr != nil || lerr != nil {
			b.Fatal(verr, lerr)
		}
		if got := (pipeline.Fusion{}).Fuse(vh, lh, 10); len(got) == 0 {
			b.Fatalf("query %q found nothing", texts[q])
		}
		took = append(took, time.Since(start))
		vtook, ltook = append(vtook, vdur), append(ltook, ldur)
	}
	p := func(d []time.Duration, q int) float64 {
		slices.Sort(d)
		return float64(d[len(d)*q/100].Microseconds())
	}
	b.ReportMetric(p(took, 50), "p50-µs")
	b.ReportMetric(p(took, 99), "p99-µs")
	b.ReportMetric(p(vtook, 50), "vector-p50-µs")
	b.ReportMetric(p(ltook, 50), "lexical-p50-µs")
}
