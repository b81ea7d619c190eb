package lexical

import (
	"flag"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTermsStemsAndDropsStopwords(t *testing.T) {
	t.Parallel()
	got := Terms("Configuring the caches of the Servers, 42x 首")
	want := []string{"configur", "cach", "server", "42x", "首"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Terms = %q, want %q", got, want)
	}
	if a, b := Terms("connection"), Terms("connecting"); !reflect.DeepEqual(a, b) {
		t.Errorf("connection → %q, connecting → %q: one stem wanted", a, b)
	}
}

func TestIndexSearchRanksByCorpusBM25(t *testing.T) {
	t.Parallel()
	x := NewIndex()
	x.Add(Analyse("Cats", "the cat sat on the mat"), 10)
	x.Add(Analyse("Prefill", "prefill time grows with prompt tokens"), 11)
	x.Add(Analyse("Decoding", "decode emits one token after another; prefill came first"), 12)
	x.Add(Analyse("Other", "nothing relevant here at all"), 13)

	got := x.Search(Terms("how does prefilling scale?"), 10, nil)
	if len(got) != 2 || got[0].Ext != 11 || got[1].Ext != 12 {
		t.Fatalf("Search = %+v, want 11 (title and body) then 12 (body only)", got)
	}
	if got[0].Score <= got[1].Score {
		t.Errorf("scores not descending: %+v", got)
	}
	if got := x.Search(Terms("prefill"), 1, nil); len(got) != 1 || got[0].Ext != 11 {
		t.Errorf("k=1: %+v", got)
	}
	if got := x.Search(Terms("prefill"), 10, func(ext int32) bool { return ext != 11 }); len(got) != 1 || got[0].Ext != 12 {
		t.Errorf("filtered: %+v", got)
	}
	if got := x.Search(Terms("zebra"), 10, nil); len(got) != 0 {
		t.Errorf("unknown term found %+v", got)
	}
	if got := x.Search(nil, 10, nil); got != nil {
		t.Errorf("empty query found %+v", got)
	}
}

func TestIndexDeleteHidesChunk(t *testing.T) {
	t.Parallel()
	x := NewIndex()
	a := x.Add(Analyse("", "alpha beta"), 1)
	x.Add(Analyse("", "alpha gamma"), 2)
	x.Delete(a)
	x.Delete(a) // twice is once
	if x.Len() != 1 || x.Dead() != 1 || x.Docs() != 2 {
		t.Fatalf("Len %d Dead %d Docs %d", x.Len(), x.Dead(), x.Docs())
	}
	if got := x.Search(Terms("alpha beta"), 10, nil); len(got) != 1 || got[0].Ext != 2 {
		t.Fatalf("after delete: %+v", got)
	}
	x.Add(Analyse("", "beta delta"), 1) // the caller's number reused, a new id
	if got := x.Search(Terms("beta"), 10, nil); len(got) != 1 || got[0].Ext != 1 {
		t.Fatalf("re-added: %+v", got)
	}
	if got := x.Search(Terms("alpha"), 10, nil); len(got) != 1 || got[0].Ext != 2 {
		t.Fatalf("old text of the re-added number found: %+v", got)
	}
}

// The reranker's failure mode this replaces: with document frequencies
// taken over the candidates, a term that all candidates share scores
// nothing, so deeper pools change the order. With the corpus's, a
// document's score is its own.
func TestScoreCorpusDoesNotDependOnTheOtherDocs(t *testing.T) {
	t.Parallel()
	x := NewIndex()
	texts := []string{"tune the cache size", "cache eviction policy", "the log rotates daily", "disk cache and page cache"}
	for i, s := range texts {
		x.Add(Analyse("", s), int32(i))
	}
	q := Terms("cache size")
	one := NewBM25().ScoreCorpus(q, []Doc{Analyse("", texts[0])}, x)
	all := NewBM25().ScoreCorpus(q, []Doc{Analyse("", texts[0]), Analyse("", texts[1]), Analyse("", texts[3])}, x)
	if one[0] <= 0 || one[0] != all[0] {
		t.Fatalf("score of the same doc: alone %v, among others %v", one[0], all[0])
	}
	if all[0] <= all[1] {
		t.Errorf("the doc with both terms should win: %v", all)
	}
}

// BenchmarkIndexSearch measures one top-50 BM25 search (the lexical leg
// at a hybrid's default depth) over n synthetic chunks and reports p50
// and p99 beside the mean, and the postings' bytes per chunk. The 1M case
// runs only when named (-bench 'IndexSearch/1M'): it holds some 1.5 GB.
func BenchmarkIndexSearch(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		name := fmt.Sprintf("%dk", n/1000)
		if n >= 1_000_000 {
			name = "1M"
			if p := flag.Lookup("test.bench").Value.String(); !strings.Contains(p, "1M") {
				b.Run(name, func(b *testing.B) { b.Skip("run with -bench 'IndexSearch/1M'") })
				continue
			}
		}
		b.Run(name, func(b *testing.B) {
			x, queries := syntheticIndex(n)
			runtime.GC()
			var took []time.Duration
			i := 0
			for b.Loop() {
				start := time.Now()
				x.Search(queries[i%len(queries)], 50, nil)
				took = append(took, time.Since(start))
				i++
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(x.PostingBytes())/float64(n), "posting-B/chunk")
		})
	}
}

// syntheticIndex fills an index with the synthetic corpus: at up to 100k
// chunks through Analyse, past that with the words as terms (the stemmer
// would take minutes at a million chunks, and searching does not care).
func syntheticIndex(n int) (*Index, [][]string) {
	x := NewIndex()
	id := int32(0)
	queries := SyntheticCorpus(n, func(words []string) {
		var d Doc
		if n <= 100_000 {
			d = Analyse("", strings.Join(words, " "))
		} else {
			counts := make(map[string]uint16, len(words))
			for _, w := range words {
				counts[w]++
			}
			for t, c := range counts {
				d.terms, d.tfs = append(d.terms, t), append(d.tfs, c)
			}
			d.len = uint32(len(words))
		}
		x.Add(d, id)
		id++
	})
	if n <= 100_000 {
		for i, q := range queries {
			queries[i] = Terms(strings.Join(q, " "))
		}
	}
	return x, queries
}
