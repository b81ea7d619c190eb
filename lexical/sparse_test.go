package lexical

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"testing"
)

func TestSparseHashIsFNV1a(t *testing.T) {
	t.Parallel()
	for _, term := range []string{"", "cach", "configur", "首", "42x"} {
		h := fnv.New32a()
		h.Write([]byte(term))
		if got, want := SparseHash(term), h.Sum32(); got != want {
			t.Errorf("SparseHash(%q) = %d, want FNV-1a %d", term, got, want)
		}
	}
}

// stats is a corpus with fixed figures whose mean length is SparseAvgLen.
type stats map[string]int

func (s stats) Docs() int               { return 1000 }
func (s stats) DocFreq(term string) int { return s[term] }
func (s stats) AvgLen() float64         { return SparseAvgLen }

// A chunk's sparse vector dotted with its question's, each entry weighed by
// the term's idf (what Qdrant's idf modifier does), is the chunk's BM25
// score against a corpus whose mean length is SparseAvgLen.
func TestSparseDotIsBM25(t *testing.T) {
	t.Parallel()
	corpus := stats{"cach": 30, "configur": 200, "evict": 5, "memori": 80}
	docs := []Doc{
		Analyse("Configuring the caches", "The cache evicts the least recently used entries when memory runs short."),
		Analyse("", "Caches, caches and more caches: a cache per node, configured once."),
		Analyse("Memory", "Nothing here is about the question at all, apart from memory."),
	}
	question := "How do I configure cache eviction?"
	want := NewBM25().ScoreCorpus(Terms(question), docs, corpus)
	qi, qv := SparseQuery(question)
	for i, d := range docs {
		di, dv := d.Sparse()
		var got float64
		for j, ix := range qi {
			if k, ok := slices.BinarySearch(di, ix); ok {
				term := ""
				for tm := range corpus {
					if SparseHash(tm) == ix {
						term = tm
					}
				}
				got += float64(qv[j]) * IDF(1000, float64(corpus[term])) * float64(dv[k])
			}
		}
		if math.Abs(got-want[i]) > 1e-4*max(1, want[i]) {
			t.Errorf("doc %d: sparse dot × idf = %.6f, BM25 = %.6f", i, got, want[i])
		}
	}
	if want[0] <= want[2] {
		t.Fatalf("test corpus: the matching chunk should outscore the other (%v)", want)
	}
}

func TestSparseShape(t *testing.T) {
	t.Parallel()
	d := Analyse("Caches", "cache caching cached eviction")
	ix, vals := d.Sparse()
	if len(ix) != 2 || len(vals) != 2 {
		t.Fatalf("Sparse = %v %v, want two entries (cach, evict)", ix, vals)
	}
	if !slices.IsSorted(ix) {
		t.Errorf("indices %v are not ascending", ix)
	}
	m := NewBM25()
	dl := float64(TitleBoost + 4)
	norm := m.K1 * (1 - m.B + m.B*dl/SparseAvgLen)
	tf := float64(TitleBoost + 3) // the title's "caches" counts TitleBoost times
	want := map[uint32]float64{SparseHash("cach"): tf * (m.K1 + 1) / (tf + norm), SparseHash("evict"): 1 * (m.K1 + 1) / (1 + norm)}
	for i, x := range ix {
		if math.Abs(float64(vals[i])-want[x]) > 1e-6 {
			t.Errorf("value of index %d = %g, want %g", x, vals[i], want[x])
		}
		if vals[i] <= 0 || float64(vals[i]) >= m.K1+1 {
			t.Errorf("value %g outside BM25's saturation range (0, k1+1)", vals[i])
		}
	}
	// The same term weighs less in a longer chunk.
	long := Analyse("", "cache "+fmt.Sprint(slices.Repeat([]string{"filler"}, 300)))
	li, lv := long.Sparse()
	k, _ := slices.BinarySearch(li, SparseHash("cach"))
	short := Analyse("", "cache filler")
	si, sv := short.Sparse()
	j, _ := slices.BinarySearch(si, SparseHash("cach"))
	if lv[k] >= sv[j] {
		t.Errorf("cach weighs %g in a 301-term chunk, %g in a 2-term one: length normalisation missing", lv[k], sv[j])
	}
	if ix, vals := Analyse("", "the of and").Sparse(); len(ix) != 0 || len(vals) != 0 {
		t.Errorf("a chunk of stop words has sparse vector %v %v, want empty", ix, vals)
	}
}

func TestSparseMergesHashCollisions(t *testing.T) {
	t.Parallel()
	seen := map[uint32]string{}
	var a, b string
	for i := 0; a == ""; i++ {
		w := fmt.Sprintf("w%d", i)
		h := SparseHash(w)
		if o, ok := seen[h]; ok {
			a, b = o, w
		}
		seen[h] = w
		if i > 1<<22 {
			t.Fatal("no FNV-1a collision among 4M words")
		}
	}
	d := Doc{terms: []string{a, "other", b}, tfs: []uint16{1, 1, 2}, len: 4}
	ix, vals := d.Sparse()
	if len(ix) != 2 {
		t.Fatalf("%q and %q hash alike; Sparse = %v, want their entries merged into one", a, b, ix)
	}
	m := NewBM25()
	norm := m.K1 * (1 - m.B + m.B*4/SparseAvgLen)
	k, _ := slices.BinarySearch(ix, SparseHash(a))
	if want := 3 * (m.K1 + 1) / (3 + norm); math.Abs(float64(vals[k])-want) > 1e-6 {
		t.Errorf("merged value %g, want tf 3's %g", vals[k], want)
	}
}

func TestSparseQuery(t *testing.T) {
	t.Parallel()
	ix, vals := SparseQuery("Cache caches, the CACHING of caches?")
	if len(ix) != 1 || ix[0] != SparseHash("cach") || vals[0] != 1 {
		t.Errorf("SparseQuery = %v %v, want the one term cach with value 1", ix, vals)
	}
	if ix, _ := SparseQuery("what is the"); len(ix) != 0 {
		t.Errorf("a question of stop words has indices %v, want none", ix)
	}
}
