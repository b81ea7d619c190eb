package pipeline

import "fmt"

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

// collapseDocs keeps the first (best) hit of each document in hits, in
// order, reusing hits' array.
func collapseDocs(hits []Hit) []Hit {
	seen := make(map[string]struct{}, len(hits))
	out := hits[:0]
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
	case RetrievalHybrid, RetrievalVector, RetrievalLexical:
		return mode
	}
	return ""
}
