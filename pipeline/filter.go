package pipeline

import "slices"

// Within narrows f to what scope allows: the documents both name (scope's
// alone, or f's alone, when the other names none) and the metadata pairs of
// both. It never widens scope. ok is false when nothing can match (no
// document in both lists, or one metadata key asked with two values); the
// search is then skipped.
//
// Scope is a key's tenant filter; f is what the request asked for.
func (f Filter) Within(scope Filter) (out Filter, ok bool) {
	switch {
	case len(scope.DocIDs) == 0:
		out.DocIDs = f.DocIDs
	case len(f.DocIDs) == 0:
		out.DocIDs = scope.DocIDs
	default:
		for _, id := range f.DocIDs {
			if slices.Contains(scope.DocIDs, id) && !slices.Contains(out.DocIDs, id) {
				out.DocIDs = append(out.DocIDs, id)
			}
		}
		if len(out.DocIDs) == 0 {
			return Filter{}, false
		}
	}
	if len(f.Metadata)+len(scope.Metadata) > 0 {
		out.Metadata = make(map[string]string, len(f.Metadata)+len(scope.Metadata))
		for k, v := range scope.Metadata {
			out.Metadata[k] = v
		}
		for k, v := range f.Metadata {
			if have, set := out.Metadata[k]; set && have != v {
				return Filter{}, false
			}
			out.Metadata[k] = v
		}
	}
	return out, true
}
