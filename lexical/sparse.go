package lexical

import (
	"cmp"
	"slices"
)

// The lexical leg as a sparse vector, for a store that scores sparse
// vectors itself (Qdrant, with its idf modifier): a chunk's vector holds
// one entry per term, its index the term's FNV-1a hash and its value the
// term's BM25 term-frequency factor; a question's holds its terms' indices
// with value 1. The store's dot product times its idf is then the chunk's
// BM25 score, but for the length normalisation, which takes SparseAvgLen
// in place of the corpus's mean length (a sparse vector is written once,
// and the mean changes with every write).

// SparseAvgLen is the mean chunk length, in Analyse's title-boosted term
// units, that a sparse vector's length normalisation assumes: what the
// chunks of ragtime's own docs/ at the default 1,000 characters average
// (85.0 over its 518 chunks: BenchmarkSparseEncode's avglen in
// retrieval/qdrant). A chunk longer than this weighs its terms less, as
// BM25's b = 0.75 does; a corpus whose chunks are much shorter or longer
// is normalised against this figure, not its own mean.
const SparseAvgLen = 85

// SparseHash is a term's index in a sparse vector: its 32-bit FNV-1a hash.
// Two terms that hash alike share an entry (a vocabulary of 100,000 terms
// has about one such pair: n²/2³³).
func SparseHash(term string) uint32 {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for i := 0; i < len(term); i++ {
		h ^= uint32(term[i])
		h *= prime
	}
	return h
}

// Sparse returns d as a sparse vector: indices ascending and unique (the
// frequencies of terms that hash alike are added before saturation), each
// value the BM25 factor tf·(k1+1) / (tf + k1·(1 − b + b·len/SparseAvgLen))
// with NewBM25's k1 and b. A document without terms has an empty vector.
func (d Doc) Sparse() (indices []uint32, values []float32) {
	type entry struct {
		ix uint32
		tf float64
	}
	es := make([]entry, len(d.terms))
	for i, t := range d.terms {
		es[i] = entry{SparseHash(t), float64(d.tfs[i])}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.ix, b.ix) })
	m := NewBM25()
	norm := m.K1 * (1 - m.B + m.B*float64(d.len)/SparseAvgLen)
	indices = make([]uint32, 0, len(es))
	values = make([]float32, 0, len(es))
	for i := 0; i < len(es); {
		ix, tf := es[i].ix, 0.0
		for ; i < len(es) && es[i].ix == ix; i++ {
			tf += es[i].tf
		}
		indices = append(indices, ix)
		values = append(values, float32(tf*(m.K1+1)/(tf+norm)))
	}
	return indices, values
}

// SparseQuery returns a question's sparse vector: the indices of its terms
// (Terms), ascending and unique, each with value 1, so that the store's
// idf weighs each term once, as BM25 counts a repeated query word once.
// A question without a searchable word has an empty vector.
func SparseQuery(question string) (indices []uint32, values []float32) {
	terms := Terms(question)
	indices = make([]uint32, 0, len(terms))
	for _, t := range terms {
		indices = append(indices, SparseHash(t))
	}
	slices.Sort(indices)
	indices = slices.Compact(indices)
	values = make([]float32, len(indices))
	for i := range values {
		values[i] = 1
	}
	return indices, values
}

// Len is d's length in title-boosted term units (BM25's document length).
func (d Doc) Len() int { return int(d.len) }
