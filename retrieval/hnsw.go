package retrieval

// This file is a hand-written HNSW graph (Malkov & Yashunin, 2018) over the
// index's vector slab. A library was the first choice and was measured:
// github.com/coder/hnsw v0.6.1 reached recall@10 of 0.19 on 20k clustered
// 384-dimensional vectors (at ef 100 and 400 alike: its layer search stops
// at the first step that does not improve the best result), keeps each
// node's neighbours in a Go map and sorts their keys on every visit, and
// holds its own copy of every vector. The other Go options wrap C++
// libraries (faiss, usearch) through cgo, which would leave the static,
// no-toolchain build behind. Written here the graph shares the slab the
// exact search already uses, keeps layer 0 in flat arrays (no per-node
// pointers for the garbage collector), and splits an insertion into a
// read-locked search and a short write-locked link so searches keep
// running while documents are added. See docs/architecture.md.

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/viterin/vek/vek32"
)

// HNSW parameters. M neighbours per node on the upper layers and 2·M on
// layer 0 are the paper's recommendation for vectors of a few hundred
// dimensions; efConstruction trades build time for graph quality.
const (
	hnswM  = 16
	hnswM0 = 2 * hnswM
	// A neighbour list may grow to its cap before it is pruned back to M
	// (M0 on layer 0) with the selection heuristic, so the pruning, which
	// compares the neighbours pairwise, runs once per several additions.
	hnswCap  = hnswM + hnswM/2
	hnswCap0 = hnswM0 + hnswM0/2
	// hnswEfConstruction is the candidate list length of an insertion's
	// search. 64 rather than 128 halves the graph's build, which is most
	// of an ingest's CPU, for recall@10 0.9486 → 0.9439 on the PostgreSQL
	// manual's hash vectors and 0.9965 → 0.9955 on 6,000 clustered ones
	// (BenchmarkHNSWBuildPGDocs, BenchmarkHNSWBuild; docs/architecture.md).
	hnswEfConstruction = 64
	// DefaultEf is the search-time candidate list length (--index-ef):
	// larger is slower and closer to exact.
	DefaultEf = 64
	// DefaultGraphFromMB is serve's and ingest's --index-graph-mb: the
	// megabytes of vectors from which the index builds its graph
	// (IndexOptions.GraphFrom), Qdrant's default indexing_threshold.
	DefaultGraphFromMB = 20
)

// graph is an HNSW graph whose node ids are slots of the index's slab.
// Layer 0 lives in paged arrays indexed by slot (layer0.go); the few nodes
// above it keep their upper layers in a map. All fields are guarded by
// Index.mu.
type graph struct {
	// l0 holds each slot's layer-0 neighbours and their distances to it,
	// to evict the farthest without recomputing.
	l0    layer0
	upper map[int32][]nodeLinks // levels 1.. of nodes above layer 0
	entry int32                 // -1 when empty
	top   int                   // the entry's level
}

// nodeLinks is one upper-layer neighbour list.
type nodeLinks struct {
	ids   []int32
	dists []float32
}

func newGraph() *graph {
	return &graph{upper: map[int32][]nodeLinks{}, entry: -1}
}

// grow makes room for slots up to n.
func (g *graph) grow(n int) { g.l0.grow(n) }

// cloneUpper returns a copy of g's upper layers, entry and level, with no
// layer 0: copyLayer0 fills that in, a few slots at a time, so that a
// compaction's frozen copy never holds writers up for a copy of the whole
// graph.
func (g *graph) cloneUpper() *graph {
	c := &graph{
		upper: make(map[int32][]nodeLinks, len(g.upper)),
		entry: g.entry,
		top:   g.top,
	}
	for s, lv := range g.upper {
		cl := make([]nodeLinks, len(lv))
		for i, nl := range lv {
			cl[i] = nodeLinks{ids: slices.Clone(nl.ids), dists: slices.Clone(nl.dists)}
		}
		c.upper[s] = cl
	}
	return c
}

// copyLayer0 copies the layer-0 lists of slots lo to hi-1 from src into g,
// whose layer 0 holds at least hi slots.
func (g *graph) copyLayer0(src *graph, lo, hi int) { g.l0.copyRange(&src.l0, lo, hi) }

// reserve gives g's layer 0 room for n nodes.
func (g *graph) reserve(n int) { g.l0.addPages(g.l0.newPages(n)) }

func (g *graph) level(s int32) int { return len(g.upper[s]) }

// neighbours returns s's neighbour ids on level l.
func (g *graph) neighbours(s int32, l int) []int32 {
	if l == 0 {
		return g.l0.ids(s)
	}
	return g.upper[s][l-1].ids
}

// cand is a node and its distance (1 − cosine) to the query.
type cand struct {
	d float32
	s int32
}

// visitedSet marks nodes seen by one search: a bitset (100k nodes take
// 12.5 KB, which stays in cache where a word per node would not), cleared
// per search.
type visitedSet struct {
	bits []uint64
	// The candidate heap and the fresh-neighbour list of a search, kept
	// with the set so a search allocates only the results it returns.
	cands candHeap
	fresh []int32
}

var visitedPool = sync.Pool{New: func() any { return &visitedSet{} }}

func getVisited(n int) *visitedSet {
	v := visitedPool.Get().(*visitedSet)
	words := (n + 63) / 64
	if cap(v.bits) < words {
		v.bits = make([]uint64, words, words+words/4)
	} else {
		v.bits = v.bits[:words]
		clear(v.bits)
	}
	return v
}

// visit marks s and reports whether it was already marked.
func (v *visitedSet) visit(s int32) bool {
	w, b := s>>6, uint64(1)<<(s&63)
	if v.bits[w]&b != 0 {
		return true
	}
	v.bits[w] |= b
	return false
}

// touchSink keeps the touching loads of searchLayer from being optimised
// away.
var touchSink atomic.Uint32

// searchLayer is the paper's SEARCH-LAYER: the ef nodes nearest to q on
// level l reachable from eps, nearest first. Dead nodes are walked through
// but, when aliveOnly is set, never returned. A search (aliveOnly) touches
// the cache lines of each step's fresh neighbours before scoring any, so
// their misses overlap; an insertion's search does not: with
// efConstruction's longer walk over 2 KB vectors the touched lines no
// longer fit in the L1 cache by the time they are scored, and the build
// ran 20–25 % slower with it (BenchmarkHNSWBuildPGDocs, -cpu 1).
func (st *state) searchLayer(dim int, q []float32, eps []cand, ef, l int, aliveOnly bool) []cand {
	g := st.graph
	vis := getVisited(len(st.alive))
	// candidates: a min-heap by distance; results: a max-heap by distance.
	cands := vis.cands[:0]
	fresh := vis.fresh[:0]
	var touch uint32
	defer func() {
		touchSink.Store(touch)
		vis.cands, vis.fresh = cands[:0], fresh[:0]
		visitedPool.Put(vis)
	}()
	res := make(candHeap, 0, ef+1)
	for _, e := range eps {
		vis.visit(e.s)
		cands.push(e, false)
		if !aliveOnly || st.alive[e.s] {
			res.push(e, true)
		}
	}
	for len(cands) > 0 {
		c := cands.pop(false)
		if len(res) >= ef && c.d > res[0].d {
			break
		}
		// Collect the unvisited neighbours and touch every cache line of
		// their vectors before scoring any: the loads are independent, so
		// the memory system fetches them in parallel rather than stalling
		// on one miss after another inside each distance.
		fresh = fresh[:0]
		for _, n := range g.neighbours(c.s, l) {
			if !vis.visit(n) {
				fresh = append(fresh, n)
			}
		}
		for _, n := range fresh {
			if !aliveOnly { // an insertion's search (see above)
				break
			}
			v := st.vecs.vec(n)
			for i := 0; i < len(v); i += 16 { // 16 floats: one 64-byte line
				touch ^= math.Float32bits(v[i])
			}
		}
		for _, n := range fresh {
			d := 1 - simdDot(q, st.vecs.vec(n))
			if len(res) < ef || d < res[0].d {
				cands.push(cand{d, n}, false)
				if !aliveOnly || st.alive[n] {
					res.push(cand{d, n}, true)
					if len(res) > ef {
						res.pop(true)
					}
				}
			}
		}
	}
	slices.SortFunc(res, func(a, b cand) int {
		if a.d != b.d {
			if a.d < b.d {
				return -1
			}
			return 1
		}
		return int(a.s - b.s)
	})
	return res
}

// greedy descends from the entry to level stop+1, one nearest node at a time.
func (st *state) greedy(dim int, q []float32, stop int) cand {
	g := st.graph
	cur := cand{1 - simdDot(q, st.vecs.vec(g.entry)), g.entry}
	for l := g.top; l > stop; l-- {
		for changed := true; changed; {
			changed = false
			for _, n := range g.neighbours(cur.s, l) {
				if d := 1 - simdDot(q, st.vecs.vec(n)); d < cur.d {
					cur, changed = cand{d, n}, true
				}
			}
		}
	}
	return cur
}

// annSearch returns up to k live nodes nearest to q, nearest first.
func (st *state) annSearch(dim int, q []float32, k, ef int) []cand {
	if st.graph.entry < 0 {
		return nil
	}
	ep := st.greedy(dim, q, 0)
	res := st.searchLayer(dim, q, []cand{ep}, max(ef, k), 0, true)
	if len(res) > k {
		res = res[:k]
	}
	return res
}

// plan is phase one of an insertion, computed under the read lock: the
// node's level and its chosen neighbours on each level.
type plan struct {
	level int
	links [][]cand // per level 0..min(level, top)
	// near are the nearest of the chunks stored before it in the same
	// batch, which the search could not see: their distances and their
	// positions in the batch (Index.plan).
	near []cand
}

// planInsert finds q's neighbours in the current graph.
func (st *state) planInsert(dim int, q []float32, level int) plan {
	g := st.graph
	p := plan{level: level}
	if g.entry < 0 {
		return p
	}
	ep := st.greedy(dim, q, level)
	eps := []cand{ep}
	p.links = make([][]cand, min(level, g.top)+1)
	for l := min(level, g.top); l >= 0; l-- {
		w := st.searchLayer(dim, q, eps, hnswEfConstruction, l, false)
		m := hnswM
		if l == 0 {
			m = hnswM0
		}
		p.links[l] = st.selectNeighbours(dim, w, m)
		eps = w
	}
	return p
}

// recent returns the last hnswM0 of slots (chunks of s's document linked
// before it) with their distances to s, the near nodes link takes when s is
// linked on its own.
func (st *state) recent(dim int, s int32, slots []int32) []cand {
	q := st.vecs.vec(s)
	var out []cand
	for _, b := range slots[max(0, len(slots)-hnswM0):] {
		out = append(out, cand{1 - simdDot(q, st.vecs.vec(b)), b})
	}
	return out
}

// selectNeighbours is the paper's heuristic (SELECT-NEIGHBORS-HEURISTIC,
// as hnswlib applies it, without refilling from the rejected): w sorted
// nearest first, a candidate is kept only when it is nearer to the node
// than to every neighbour kept so far, which spreads links across
// clusters. An exact duplicate of a kept neighbour is rejected too: it
// would route nowhere new, and duplicates (a re-ingested chunk beside its
// deleted predecessor) could otherwise fill a list and cut a cluster off.
func (st *state) selectNeighbours(dim int, w []cand, m int) []cand {
	if len(w) <= m {
		return slices.Clone(w)
	}
	out := make([]cand, 0, m)
	for _, c := range w {
		if len(out) == m {
			break
		}
		cv := st.vecs.vec(c.s)
		keep := true
		for _, o := range out {
			if d := 1 - simdDot(cv, st.vecs.vec(o.s)); d < c.d || d <= 1e-6 {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, c)
		}
	}
	return out
}

// link is phase two, under the write lock: it wires slot s (whose vector is
// in the slab) into the graph with the planned neighbours plus near (nodes
// inserted before it in the same batch, which the plan could not see, with
// their distances to s), keeping the nearest when there are too many.
func (st *state) link(dim int, s int32, p plan, near []cand) {
	g := st.graph
	g.grow(len(st.alive))
	if p.level > 0 {
		g.upper[s] = make([]nodeLinks, p.level)
	} else {
		delete(g.upper, s)
	}
	_, _, count := g.l0.lists(s)
	*count = 0
	if g.entry < 0 {
		g.entry, g.top = s, p.level
		return
	}
	for l := 0; l <= p.level; l++ {
		var cs []cand
		if l < len(p.links) {
			cs = slices.Clone(p.links[l])
		}
		for _, c := range near {
			if c.s != s && g.level(c.s) >= l {
				cs = append(cs, c)
			}
		}
		m := hnswM
		if l == 0 {
			m = hnswM0
		}
		sortCands(cs)
		cs = slices.CompactFunc(cs, func(a, b cand) bool { return a.s == b.s })
		if len(cs) > m {
			cs = cs[:m]
		}
		for _, c := range cs {
			st.addLink(dim, s, c, l)
			st.addLink(dim, c.s, cand{c.d, s}, l)
		}
	}
	if p.level > g.top {
		g.entry, g.top = s, p.level
	}
}

// addLink adds n to s's list on level l. A full list is pruned back to M
// (M0 on layer 0) with the selection heuristic, so links that bridge clusters survive
// (keeping only the nearest would cut them and strand whole clusters).
func (st *state) addLink(dim int, s int32, n cand, l int) {
	g := st.graph
	if l == 0 {
		ids, ds, count := g.l0.lists(s)
		c := int(*count)
		if slices.Contains(ids[:c], n.s) {
			return
		}
		if c == hnswCap0 {
			c = st.prune(dim, s, ids[:c], ds[:c], hnswM0)
		}
		ids[c], ds[c] = n.s, n.d
		*count = uint8(c + 1)
		return
	}
	lv := g.upper[s]
	if l > len(lv) {
		return
	}
	nl := &lv[l-1]
	if slices.Contains(nl.ids, n.s) {
		return
	}
	if len(nl.ids) == hnswCap {
		c := st.prune(dim, s, nl.ids, nl.dists, hnswM)
		nl.ids, nl.dists = nl.ids[:c], nl.dists[:c]
	}
	nl.ids = append(nl.ids, n.s)
	nl.dists = append(nl.dists, n.d)
}

// prune keeps at most m-1 of s's neighbours in ids/ds (in place), leaving
// room for one more, and returns how many it kept.
func (st *state) prune(dim int, s int32, ids []int32, ds []float32, m int) int {
	// Deleted neighbours are kept like live ones: searches route through
	// them, and dropping them would cut the graph where a document was
	// replaced.
	cs := make([]cand, 0, len(ids))
	for i, t := range ids {
		cs = append(cs, cand{ds[i], t})
	}
	sortCands(cs)
	kept := st.selectNeighbours(dim, cs, m-1)
	for i, c := range kept {
		ids[i], ds[i] = c.s, c.d
	}
	return len(kept)
}

func sortCands(cs []cand) {
	slices.SortFunc(cs, func(a, b cand) int {
		if a.d < b.d {
			return -1
		} else if a.d > b.d {
			return 1
		}
		return int(a.s - b.s)
	})
}

// candHeap is a binary heap of candidates: a min-heap by distance, or a
// max-heap when the methods are called with max set. Written out rather
// than container/heap because it is the inner loop of every search, where
// interface calls would box each element.
type candHeap []cand

func (h candHeap) less(i, j int, max bool) bool {
	if max {
		return h[i].d > h[j].d
	}
	return h[i].d < h[j].d
}

func (h *candHeap) push(c cand, max bool) {
	*h = append(*h, c)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a.less(i, p, max) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *candHeap) pop(max bool) cand {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, w := 2*i+1, 2*i+2, i
		if l < n && a.less(l, w, max) {
			w = l
		}
		if r < n && a.less(r, w, max) {
			w = r
		}
		if w == i {
			break
		}
		a[i], a[w] = a[w], a[i]
		i = w
	}
	*h = a
	return top
}

// simdDot is the inner product (len(b) ≥ len(a)) of every search, the
// graph's and the exact scans', through github.com/viterin/vek, which uses
// AVX2/FMA (or NEON) when the CPU has them and plain Go otherwise: about
// five times faster than a Go loop of four accumulators for 384
// dimensions. The exact scan of the docs corpus (~900 chunks of 512) was
// 10 % of serve's CPU per ask at 100 streams with the Go loop.
func simdDot(a, b []float32) float32 { return vek32.Dot(a, b[:len(a)]) }
