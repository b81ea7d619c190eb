package pipeline

import (
	"cmp"
	"fmt"
	"slices"
)

// Fusion methods: how a hybrid retrieval merges its legs.
const (
	// FusionRRF is reciprocal rank fusion: a chunk scores Σ 1/(k + rank)
	// over the legs that found it (Cormack et al., 2009).
	FusionRRF = "rrf"
	// FusionWeighted is weighted score fusion: each leg's scores are
	// min-max normalised over its own list, then summed with the legs'
	// weights (a leg that did not find a chunk adds 0).
	FusionWeighted = "weighted"
)

// DefaultRRFK is reciprocal rank fusion's k when none is configured.
const DefaultRRFK = 60

// Fusion configures how a hybrid retrieval merges its legs. The zero
// value is RRF with k = DefaultRRFK.
type Fusion struct {
	// Method is FusionRRF or FusionWeighted; empty means FusionRRF.
	Method string
	// K is RRF's k (> 0); 0 means DefaultRRFK.
	K float64
	// VectorWeight is the vector leg's weight in a weighted fusion
	// (0–1; the lexical leg's is 1 − VectorWeight). Nil means 0.5.
	VectorWeight *float64
}

// Check reports the first setting that is wrong, naming serve's flag.
func (f Fusion) Check() error {
	switch f.Method {
	case "", FusionRRF, FusionWeighted:
	default:
		return fmt.Errorf("--fusion must be rrf or weighted, got %q", f.Method)
	}
	if f.K < 0 || f.K != f.K {
		return fmt.Errorf("--rrf-k must be positive, got %g", f.K)
	}
	if w := f.VectorWeight; w != nil && !(*w >= 0 && *w <= 1) {
		return fmt.Errorf("--fusion-vector-weight must be between 0 and 1, got %g", *w)
	}
	return nil
}

// Name is the method as stage attrs show it.
func (f Fusion) Name() string { return cmp.Or(f.Method, FusionRRF) }

// markLeg sets each hit's rank and score in one leg (vector or not).
func markLeg(hits []Hit, vector bool) {
	for i := range hits {
		rank, score := i+1, hits[i].Score
		if vector {
			hits[i].VectorRank, hits[i].VectorScore = &rank, &score
		} else {
			hits[i].LexicalRank, hits[i].LexicalScore = &rank, &score
		}
	}
}

// Fuse merges the vector and lexical legs' hits (each best first, their
// Score the leg's own) into one list of at most k, best first, by f; it
// sets each hit's Legs from its positions and scores. A chunk both
// legs found appears once, carrying both legs' ranks and scores; its Score
// is the fused one. Equal fused scores keep the better vector rank first,
// then the better lexical rank, then the chunk id's order, so the result
// is deterministic.
func (f Fusion) Fuse(vector, lexical []Hit, k int) []Hit {
	return f.fuse(vector, lexical, k, false)
}

// FuseDocs is Fuse by document: each leg is first cut to the best chunk of
// each document (the lexical leg's documents scored and ranked by
// DocSumWeight's rule), its ranks becoming the documents' ranks in that
// leg, and a document both legs found appears once, with the chunk of the
// leg that ranks it better (the vector leg's on a tie).
func (f Fusion) FuseDocs(vector, lexical []Hit, k int) []Hit {
	return f.fuse(collapseDocs(vector), collapseLexical(lexical), k, true)
}

func (f Fusion) fuse(vector, lexical []Hit, k int, byDoc bool) []Hit {
	markLeg(vector, true)
	markLeg(lexical, false)
	key := func(h *Hit) string { return h.ID }
	if byDoc {
		key = func(h *Hit) string { return h.DocID }
	}
	byID := make(map[string]int, len(vector)+len(lexical))
	out := make([]Hit, 0, len(vector)+len(lexical))
	for _, h := range vector {
		byID[key(&h)] = len(out)
		out = append(out, h)
	}
	for _, h := range lexical {
		if i, ok := byID[key(&h)]; ok {
			if o := &out[i]; o.ID != h.ID && *h.LexicalRank < *o.VectorRank {
				o.Chunk = h.Chunk // the leg that ranks the document better names its chunk
			}
			out[i].LexicalRank, out[i].LexicalScore = h.LexicalRank, h.LexicalScore
			continue
		}
		h.VectorRank, h.VectorScore = nil, nil
		out = append(out, h)
	}
	switch f.Name() {
	case FusionWeighted:
		w := 0.5
		if f.VectorWeight != nil {
			w = *f.VectorWeight
		}
		vlo, vhi := scoreRange(vector)
		llo, lhi := scoreRange(lexical)
		for i := range out {
			h := &out[i]
			h.Score = 0
			if h.VectorScore != nil {
				h.Score += w * unit(*h.VectorScore, vlo, vhi)
			}
			if h.LexicalScore != nil {
				h.Score += (1 - w) * unit(*h.LexicalScore, llo, lhi)
			}
		}
	default:
		rk := cmp.Or(f.K, DefaultRRFK)
		for i := range out {
			h := &out[i]
			h.Score = 0
			if h.VectorRank != nil {
				h.Score += 1 / (rk + float64(*h.VectorRank))
			}
			if h.LexicalRank != nil {
				h.Score += 1 / (rk + float64(*h.LexicalRank))
			}
		}
	}
	slices.SortFunc(out, func(a, b Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		if c := cmp.Compare(rankOr(a.VectorRank), rankOr(b.VectorRank)); c != 0 {
			return c
		}
		if c := cmp.Compare(rankOr(a.LexicalRank), rankOr(b.LexicalRank)); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out[:min(k, len(out))]
}

// rankOr is a leg's rank, or past every rank when the leg did not find it.
func rankOr(r *int) int {
	if r == nil {
		return MaxLegK + 1
	}
	return *r
}

func scoreRange(hits []Hit) (lo, hi float64) {
	for i, h := range hits {
		if i == 0 || h.Score < lo {
			lo = h.Score
		}
		if i == 0 || h.Score > hi {
			hi = h.Score
		}
	}
	return lo, hi
}

// unit maps s from [lo, hi] to [0, 1]; a leg whose scores are all equal
// gives each 1.
func unit(s, lo, hi float64) float64 {
	if hi <= lo {
		return 1
	}
	return (s - lo) / (hi - lo)
}
