package pipeline

import (
	"cmp"
	"fmt"
	"slices"

	"ragtime"
)

// Collapse modes: what one entry of a search's ranking is.
const (
	// CollapseDoc ranks documents: each leg keeps the best chunk of each
	// document, the legs are fused by document, and the result holds one
	// chunk per document, so that one long page cannot fill the top_k.
	CollapseDoc = "doc"
	// CollapseNone ranks chunks: several chunks of one document may
	// follow each other in the result.
	CollapseNone = "none"
)

// CheckCollapse checks a collapse mode ("" is the default); the error
// names field.
func CheckCollapse(field, mode string) error {
	switch mode {
	case "", CollapseDoc, CollapseNone:
		return nil
	}
	return &ValidationError{Field: field, Code: "collapse_invalid",
		Message: fmt.Sprintf("%s must be doc or none, got %.40q", field, mode)}
}

// collapseDocs returns the first (best) hit of each document in hits, in
// order, in a new slice (a Searcher may keep the one it returned).
func collapseDocs(hits []Hit) []Hit {
	seen := make(map[string]struct{}, len(hits))
	out := make([]Hit, 0, len(hits))
	for _, h := range hits {
		if _, ok := seen[h.DocID]; ok {
			continue
		}
		seen[h.DocID] = struct{}{}
		out = append(out, h)
	}
	return out
}

// knownRetrieval is mode when it is a retrieval mode, else empty: what a
// record stores, so that a request refused before its mode was checked
// cannot break the column's CHECK and lose the record.
func knownRetrieval(mode string) string {
	switch mode {
	case ragtime.RetrievalHybrid, ragtime.RetrievalVector, ragtime.RetrievalLexical:
		return mode
	}
	return ""
}

// DocSumWeight and DocSumChunks score a document when the lexical leg is
// collapsed by document: its best chunk's BM25 score plus DocSumWeight ×
// the scores of its next DocSumChunks best chunks among the leg's
// candidates. BM25 evidence adds up over a document's text, so a page that
// answers in several chunks outranks one that matches once by chance; the
// small weight keeps the best chunk the main evidence, and the cap keeps a
// long page from winning by length, and the ranking from changing with the
// leg's depth. On make bench-retrieval's 149 questions the lexical leg's
// MRR@10 goes from 0.539 to 0.575 (0.569–0.580 at lexical_k 50–200; without
// the cap it falls from 0.587 to 0.525 as lexical_k goes from 50 to 200;
// docs/tuning.md).
const (
	DocSumWeight = 0.1
	DocSumChunks = 2
)

// collapseLexical collapses a lexical leg's hits (best first) by document:
// each document once, as its best chunk, scored by DocSumWeight's rule and
// re-sorted by that score (ties keep the leg's order).
func collapseLexical(hits []Hit) []Hit {
	best := make(map[string]int, len(hits))
	rest := make([]float64, 0, len(hits))
	others := make([]int, 0, len(hits))
	out := make([]Hit, 0, len(hits))
	for _, h := range hits {
		if i, ok := best[h.DocID]; ok {
			if others[i] < DocSumChunks {
				rest[i] += h.Score
				others[i]++
			}
			continue
		}
		best[h.DocID] = len(out)
		out = append(out, h)
		rest = append(rest, 0)
		others = append(others, 0)
	}
	for i := range out {
		out[i].Score += DocSumWeight * rest[i]
	}
	slices.SortStableFunc(out, func(a, b Hit) int { return cmp.Compare(b.Score, a.Score) })
	return out
}
