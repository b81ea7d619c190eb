package retrieval

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"ragtime/pipeline"
)

// The embedded index's search path: an exact scan (in parallel over a
// large slab), the graph search, filters, and the top k.

// exactBelow is the slab size below which searches scan exactly even with
// a graph: a scan of a thousand vectors takes well under a millisecond, and
// is exact.
var exactBelow = 1024

// parallelMin is the number of slots from which a search is split across
// cores; below it the goroutine hand-off costs more than it saves.
var parallelMin = 8192

// Search returns the k chunks most similar (cosine) to query, best first.
// A zero query vector matches nothing.
func (ix *Index) Search(ctx context.Context, query []float32, k int, filter pipeline.Filter) ([]pipeline.Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("searching the embedded index: %w", err)
	}
	if len(query) != ix.dim {
		return nil, fmt.Errorf("searching the embedded index: query has %d dimensions, index has %d: %w", len(query), ix.dim, ErrDimension)
	}
	if k <= 0 {
		return nil, nil
	}
	qp := getQueryVec(ix.dim)
	defer queryVecs.Put(qp)
	q := *qp
	if !normaliseInto(q, query) {
		return nil, fmt.Errorf("searching the embedded index: query has a NaN or infinite component")
	}
	var zero = true
	for _, x := range q {
		if x != 0 {
			zero = false
			break
		}
	}
	if zero {
		return nil, nil
	}

	ix.mu.RLock()
	defer ix.mu.RUnlock()
	st := ix.st
	k = min(k, st.live) // a huge k must not size a huge heap
	if k == 0 {
		return nil, nil
	}
	var top topK
	var err error
	// A graph with nothing linked yet (one just started) is no help: the
	// scan below covers every chunk, in parallel.
	graph := st.graph != nil && st.graph.entry >= 0 && len(st.alive) >= exactBelow
	switch {
	case len(filter.DocIDs) > 0 || len(filter.Metadata) > 0:
		top, err = st.searchFiltered(ctx, ix.dim, q, k, filter)
	case graph && (len(st.unlinked) > 0 || len(st.linking) > 0):
		// Chunks still being linked (loaded ones, a large document's):
		// the graph's best and theirs, scored exactly, merged.
		top = topK{k: k, items: make([]scored, 0, k)}
		for _, c := range st.annSearch(ix.dim, q, k, ix.ef) {
			top.offer(scored{slot: c.s, score: 1 - c.d})
		}
		for _, list := range [][]int32{st.unlinked, st.linking} {
			for _, s := range list {
				if st.alive[s] {
					top.offer(scored{slot: s, score: simdDot(q, st.vecs.vec(s))})
				}
			}
		}
	case graph:
		found := st.annSearch(ix.dim, q, k, ix.ef)
		hits := make([]pipeline.Hit, len(found))
		for i, c := range found {
			// The chunk's Metadata is the index's own, shared (Searcher's
			// contract): it is never modified in place, only replaced
			// with the chunk.
			hits[i] = pipeline.Hit{Chunk: st.chunks[c.s], Score: float64(1 - c.d)}
		}
		return hits, nil
	default:
		top, err = st.searchAll(ctx, ix.dim, q, k)
	}
	if err != nil {
		return nil, err
	}
	items := top.sorted()
	hits := make([]pipeline.Hit, len(items))
	for i, it := range items {
		hits[i] = pipeline.Hit{Chunk: st.chunks[it.slot], Score: float64(it.score)} // Metadata shared, as above
	}
	return hits, nil
}

// queryVecs holds the normalised query vectors of finished searches: one
// per search, of the index's dimension, let go as the search returns.
var queryVecs sync.Pool

// getQueryVec returns a pooled vector of dim components (their values
// left over; normaliseInto writes every one).
func getQueryVec(dim int) *[]float32 {
	if p, _ := queryVecs.Get().(*[]float32); p != nil && cap(*p) >= dim {
		*p = (*p)[:dim]
		return p
	}
	v := make([]float32, dim)
	return &v
}

// ctxEvery is how many slots a scan covers between checks of ctx.
const ctxEvery = 8192

func (st *state) searchAll(ctx context.Context, dim int, q []float32, k int) (topK, error) {
	n := len(st.alive)
	parts := 1
	if p := runtime.GOMAXPROCS(0); n >= parallelMin && p > 1 {
		parts = min(p, n/(parallelMin/2))
	}
	if parts <= 1 {
		return st.scanRange(ctx, dim, q, k, 0, n)
	}
	tops := make([]topK, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Go(func() { tops[p], errs[p] = st.scanRange(ctx, dim, q, k, lo, hi) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return topK{}, err
	}
	top := tops[0]
	for _, t := range tops[1:] {
		for _, it := range t.items {
			top.offer(it)
		}
	}
	return top, nil
}

// scanRange scores slots [lo, hi): the hot loop of every search.
func (st *state) scanRange(ctx context.Context, dim int, q []float32, k, lo, hi int) (topK, error) {
	top := topK{k: k, items: make([]scored, 0, k)}
	alive := st.alive
	for i := lo; i < hi; i++ {
		if (i-lo)%ctxEvery == ctxEvery-1 {
			if err := ctx.Err(); err != nil {
				return top, fmt.Errorf("searching the embedded index: %w", err)
			}
		}
		if !alive[i] {
			continue
		}
		s := simdDot(q, st.vecs.vec(int32(i)))
		if len(top.items) < k || s > top.items[0].score {
			top.offer(scored{slot: int32(i), score: s})
		}
	}
	return top, nil
}

func (st *state) searchFiltered(ctx context.Context, dim int, q []float32, k int, f pipeline.Filter) (topK, error) {
	top := topK{k: k, items: make([]scored, 0, k)}
	consider := func(s int32) {
		c := &st.chunks[s]
		for key, want := range f.Metadata {
			if got, ok := c.Metadata[key]; !ok || got != want {
				return
			}
		}
		top.offer(scored{slot: s, score: simdDot(q, st.vecs.vec(s))})
	}
	if len(f.DocIDs) > 0 {
		seen := make(map[string]bool, len(f.DocIDs))
		for _, id := range f.DocIDs {
			e, ok := st.docs[id]
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			for _, s := range e.slots {
				consider(s)
			}
		}
		return top, ctx.Err()
	}
	for i, ok := range st.alive {
		if i%ctxEvery == ctxEvery-1 {
			if err := ctx.Err(); err != nil {
				return top, fmt.Errorf("searching the embedded index: %w", err)
			}
		}
		if ok {
			consider(int32(i))
		}
	}
	return top, nil
}

type scored struct {
	slot  int32
	score float32
}

// better orders results: higher score first, then lower slot, so equal
// scores rank the same however a scan was split.
func better(a, b scored) bool {
	return a.score > b.score || (a.score == b.score && a.slot < b.slot)
}

// topK keeps the k best results seen in a min-heap whose root is the worst
// kept. It is written out (not container/heap) because it sits in the
// search's hot loop, where container/heap's interface calls would box every
// element.
type topK struct {
	k     int
	items []scored
}

func (t *topK) offer(x scored) {
	h := t.items
	if len(h) < t.k {
		h = append(h, x)
		for i := len(h) - 1; i > 0; { // sift up
			p := (i - 1) / 2
			if !better(h[p], h[i]) {
				break
			}
			h[p], h[i] = h[i], h[p]
			i = p
		}
		t.items = h
		return
	}
	if !better(x, h[0]) {
		return
	}
	h[0] = x
	for i := 0; ; { // sift down
		l, r, w := 2*i+1, 2*i+2, i
		if l < len(h) && better(h[w], h[l]) {
			w = l
		}
		if r < len(h) && better(h[w], h[r]) {
			w = r
		}
		if w == i {
			break
		}
		h[i], h[w] = h[w], h[i]
		i = w
	}
}

// sorted returns the kept results best first.
func (t *topK) sorted() []scored {
	out := slices.Clone(t.items)
	slices.SortFunc(out, func(a, b scored) int {
		switch {
		case better(a, b):
			return -1
		case better(b, a):
			return 1
		}
		return 0
	})
	return out
}
