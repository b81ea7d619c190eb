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

// IDF is BM25's inverse document frequency of a term held by df of n
// documents, in the always-positive form ln(1 + (n − df + 0.5)/(df + 0.5)).
func IDF(n, df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }

// term is one term's share of a document's score: tf occurrences in a
// document of length dl, the corpus's mean length being avg.
func (m BM25) term(idf, tf, dl, avg float64) float64 {
	return idf * tf * (m.K1 + 1) / (tf + m.K1*(1-m.B+m.B*dl/avg))
}

// Score returns one score per document for the query words. Document
// frequencies are taken over docs itself, which is what picking sentences
// from a context needs (a reranker wants the corpus's: ScoreCorpus). A
// repeated query word counts once.
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
		var s float64
		for w, f := range tfs[i] {
			s += m.term(IDF(n, float64(df[w])), float64(f), float64(len(d)), avg)
		}
		scores[i] = s
	}
	return scores
}

// Stats are a corpus's statistics as BM25 needs them; *Index has them.
type Stats interface {
	// Docs is the number of documents (N).
	Docs() int
	// DocFreq is how many documents hold term.
	DocFreq(term string) int
	// AvgLen is the documents' mean length.
	AvgLen() float64
}

// ScoreCorpus returns one score per document (made by Analyse) for the
// query terms, with document frequencies and the mean length taken from
// the corpus, so that a document's score does not depend on which others
// are scored beside it. A repeated query term counts once; a corpus that
// is empty (or does not hold a term) falls back to the documents' own
// figures for it.
func (m BM25) ScoreCorpus(query []string, docs []Doc, corpus Stats) []float64 {
	scores := make([]float64, len(docs))
	if len(docs) == 0 || len(query) == 0 {
		return scores
	}
	n, avg := float64(corpus.Docs()), corpus.AvgLen()
	if n == 0 || avg == 0 {
		var total float64
		for _, d := range docs {
			total += float64(d.len)
		}
		n, avg = float64(len(docs)), total/float64(len(docs))
	}
	if avg == 0 {
		return scores
	}
	seen := make(map[string]bool, len(query))
	for _, t := range query {
		if seen[t] {
			continue
		}
		seen[t] = true
		df := float64(corpus.DocFreq(t))
		if df == 0 { // not in the corpus (yet): count it over the documents
			for _, d := range docs {
				if d.tf(t) > 0 {
					df++
				}
			}
		}
		idf := IDF(max(n, df), df)
		for i, d := range docs {
			if tf := d.tf(t); tf > 0 {
				scores[i] += m.term(idf, float64(tf), float64(d.len), avg)
			}
		}
	}
	return scores
}

// tf returns how often term occurs in d (title-boosted).
func (d Doc) tf(term string) uint16 {
	for i, t := range d.terms {
		if t == term {
			return d.tfs[i]
		}
	}
	return 0
}
