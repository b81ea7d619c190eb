package lexical

import "math"

// BM25 scores documents against a query with Okapi BM25. The zero value is
// not useful; use NewBM25 for the usual parameters.
type BM25 struct {
	// K1 controls term-frequency saturation (typically 1.2).
	K1 float64
	// B controls document-length normalisation (typically 0.75).
	B float64
}

// NewBM25 returns BM25 with k1 = 1.2 and b = 0.75.
func NewBM25() BM25 { return BM25{K1: 1.2, B: 0.75} }

// Score returns one score per document for the query words. Document
// frequencies are taken over docs itself, which is what reranking a candidate
// list or picking sentences from a context needs. IDF uses the
// always-positive form ln(1 + (N − n + 0.5)/(n + 0.5)). A repeated query word
// counts once.
func (m BM25) Score(query []string, docs [][]string) []float64 {
	scores := make([]float64, len(docs))
	if len(docs) == 0 || len(query) == 0 {
		return scores
	}
	terms := make(map[string]struct{}, len(query))
	for _, q := range query {
		terms[q] = struct{}{}
	}
	df := make(map[string]int, len(terms))
	tfs := make([]map[string]int, len(docs))
	total := 0
	for i, d := range docs {
		total += len(d)
		tf := make(map[string]int)
		for _, w := range d {
			if _, ok := terms[w]; ok {
				tf[w]++
			}
		}
		for w := range tf {
			df[w]++
		}
		tfs[i] = tf
	}
	n := float64(len(docs))
	avg := float64(total) / n
	if avg == 0 {
		return scores
	}
	for i, d := range docs {
		norm := m.K1 * (1 - m.B + m.B*float64(len(d))/avg)
		var s float64
		for w, f := range tfs[i] {
			idf := math.Log(1 + (n-float64(df[w])+0.5)/(float64(df[w])+0.5))
			tf := float64(f)
			s += idf * tf * (m.K1 + 1) / (tf + norm)
		}
		scores[i] = s
	}
	return scores
}
