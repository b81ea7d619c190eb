package lexical

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"sync"
)

// TitleBoost is how many times a term of a chunk's title field (its
// document's title and its own heading) counts against one of its body:
// a field boost folded into the term frequency, as BM25F does.
const TitleBoost = 2

// Doc is one chunk analysed for the index: its terms with their
// (title-boosted) frequencies and its length in the same units. Analyse
// makes it outside any lock; Index.Add only files it.
type Doc struct {
	terms []string
	tfs   []uint16
	len   uint32
}

// Analyse returns the Doc of a chunk whose title field is title and whose
// body is body, both under Analyzer.
func Analyse(title, body string) Doc {
	a := getAnalyzer()
	defer putAnalyzer(a)
	return a.Analyse(body, title)
}

// AnalyseFields is Analyse with the title field given in parts (joined
// with a line break), so the caller need not concatenate them.
func AnalyseFields(body string, titles ...string) Doc {
	a := getAnalyzer()
	defer putAnalyzer(a)
	return a.Analyse(body, titles...)
}

// WithAnalyzer calls f with one of the analyzers kept between calls (its
// cache warm), for f alone to use on any number of texts, and keeps it
// again afterwards. A worker analysing many chunks holds one analyzer,
// whose cache then stays in its core's cache, rather than taking one per
// chunk from whichever core used it last.
func WithAnalyzer(f func(a *TermAnalyzer)) {
	a := getAnalyzer()
	defer putAnalyzer(a)
	f(a)
}

// newDoc makes the Doc of term counts summing to n.
func newDoc(counts map[string]int, n int) Doc {
	d := Doc{terms: make([]string, 0, len(counts)), tfs: make([]uint16, 0, len(counts)), len: uint32(n)}
	for t, c := range counts {
		d.terms = append(d.terms, t)
		d.tfs = append(d.tfs, uint16(min(c, math.MaxUint16)))
	}
	return d
}

// Index is an inverted index over chunks scored with BM25 against the
// corpus's own statistics. Each added chunk gets an id of its own, never
// reused; a deleted one is only marked dead, its postings skipped until the
// caller rebuilds the index (the embedded store does at each compaction).
// As in Lucene, a term's document frequency keeps counting dead chunks
// until then, and N is every id ever given, so idf stays positive.
//
// Postings are delta-coded varints, one (id gap, frequency) pair per chunk
// holding the term: two to three bytes a posting.
//
// Index is not safe for concurrent writes; searches may run together, and
// with nothing else (the embedded store's read lock).
type Index struct {
	bm25  BM25
	terms map[string]*postings
	// ext maps an id to the caller's number for it (a slot), -1 once dead.
	ext  []int32
	lens []uint32
	live int
	// total is the summed length of the live chunks.
	total uint64
}

type postings struct {
	df   uint32
	last uint32 // the last id appended
	data []byte
}

// NewIndex returns an empty index scoring with BM25 k1 = 1.2, b = 0.75.
func NewIndex() *Index { return &Index{bm25: NewBM25(), terms: make(map[string]*postings)} }

// Add files d under a new id and returns it; ext is the caller's number for
// the chunk, which Search returns.
func (x *Index) Add(d Doc, ext int32) uint32 {
	id := uint32(len(x.ext))
	x.ext = append(x.ext, ext)
	x.lens = append(x.lens, d.len)
	x.live++
	x.total += uint64(d.len)
	for i, t := range d.terms {
		p := x.terms[t]
		if p == nil {
			p = &postings{}
			x.terms[t] = p
		}
		gap := id - p.last
		if p.df == 0 {
			gap = id
		}
		p.data = binary.AppendUvarint(p.data, uint64(gap))
		p.data = binary.AppendUvarint(p.data, uint64(d.tfs[i]))
		p.last = id
		p.df++
	}
	return id
}

// Delete marks id dead: searches skip it from now on.
func (x *Index) Delete(id uint32) {
	if int(id) >= len(x.ext) || x.ext[id] < 0 {
		return
	}
	x.ext[id] = -1
	x.live--
	x.total -= uint64(x.lens[id])
}

// Len returns the number of live chunks.
func (x *Index) Len() int { return x.live }

// Dead returns the number of dead chunks whose postings are still kept.
func (x *Index) Dead() int { return len(x.ext) - x.live }

// Docs returns N of the idf: every id given, dead ones included.
func (x *Index) Docs() int { return len(x.ext) }

// DocFreq returns how many chunks (dead ones included, see Index) hold term.
func (x *Index) DocFreq(term string) int {
	if p := x.terms[term]; p != nil {
		return int(p.df)
	}
	return 0
}

// AvgLen returns the live chunks' mean length.
func (x *Index) AvgLen() float64 {
	if x.live == 0 {
		return 0
	}
	return float64(x.total) / float64(x.live)
}

// PostingBytes returns the size of the postings' encoded data.
func (x *Index) PostingBytes() int {
	n := 0
	for _, p := range x.terms {
		n += len(p.data)
	}
	return n
}

// Scored is one chunk Search found: the caller's number for it and its
// BM25 score.
type Scored struct {
	Ext   int32
	Score float64
}

// Search returns the k live chunks with the highest BM25 score for the
// query terms (Terms of the question; a repeated term counts once) that
// accept, when not nil, lets through, best first; equal scores keep the
// lower caller's number first. Chunks sharing no term are not returned.
func (x *Index) Search(terms []string, k int, accept func(ext int32) bool) []Scored {
	if k <= 0 || x.live == 0 || len(terms) == 0 {
		return nil
	}
	acc := getAcc(len(x.ext))
	defer putAcc(acc)
	n, avg := float64(len(x.ext)), x.AvgLen()
	seen := make(map[string]bool, len(terms))
	for _, t := range terms {
		p := x.terms[t]
		if p == nil || seen[t] {
			continue
		}
		seen[t] = true
		idf := IDF(n, float64(p.df))
		id := uint32(0)
		for data := p.data; len(data) > 0; {
			gap, g := binary.Uvarint(data)
			tf, f := binary.Uvarint(data[g:])
			data = data[g+f:]
			id += uint32(gap)
			if x.ext[id] < 0 {
				continue
			}
			s := x.bm25.term(idf, float64(tf), float64(x.lens[id]), avg)
			if acc.score[id] == 0 {
				acc.touched = append(acc.touched, id)
			}
			acc.score[id] += float32(s)
		}
	}
	top := make([]Scored, 0, min(k, len(acc.touched))+1)
	worse := func(a, b Scored) bool { return a.Score < b.Score || (a.Score == b.Score && a.Ext > b.Ext) }
	for _, id := range acc.touched {
		s := Scored{Ext: x.ext[id], Score: float64(acc.score[id])}
		if accept != nil && !accept(s.Ext) {
			continue
		}
		if len(top) == k && !worse(top[0], s) {
			continue
		}
		// top is a min-heap on worse (its root the worst kept).
		if len(top) == k {
			top[0] = s
			siftDown(top, worse)
			continue
		}
		top = append(top, s)
		for i := len(top) - 1; i > 0; {
			p := (i - 1) / 2
			if !worse(top[i], top[p]) {
				break
			}
			top[i], top[p] = top[p], top[i]
			i = p
		}
	}
	slices.SortFunc(top, func(a, b Scored) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.Ext, b.Ext)
	})
	return top
}

func siftDown(h []Scored, worse func(a, b Scored) bool) {
	for i := 0; ; {
		l, r, w := 2*i+1, 2*i+2, i
		if l < len(h) && worse(h[l], h[w]) {
			w = l
		}
		if r < len(h) && worse(h[r], h[w]) {
			w = r
		}
		if w == i {
			return
		}
		h[i], h[w] = h[w], h[i]
		i = w
	}
}

// accumulator holds one search's per-chunk scores: a dense array indexed
// by id, cleared through the ids touched, pooled between searches so that a
// search of a million chunks does not allocate four megabytes.
type accumulator struct {
	score   []float32
	touched []uint32
}

var accs sync.Pool

func getAcc(n int) *accumulator {
	a, _ := accs.Get().(*accumulator)
	if a == nil {
		a = &accumulator{}
	}
	if cap(a.score) < n {
		a.score = make([]float32, n, n+n/4)
	}
	a.score = a.score[:n]
	return a
}

func putAcc(a *accumulator) {
	for _, id := range a.touched {
		a.score[id] = 0
	}
	a.touched = a.touched[:0]
	accs.Put(a)
}
