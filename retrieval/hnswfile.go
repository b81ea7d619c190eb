package retrieval

// The graph file (<data dir>/index/embedded.hnsw) sits beside the index
// file so loading a large index does not rebuild its HNSW graph. Nodes are
// numbered as the index file lays chunks out (documents by id, chunks in
// order); edges to deleted chunks are dropped. All integers little-endian:
//
//	magic      8 bytes "RAGTHNS1"
//	generation u64     the index file generation it belongs to
//	nodes      u32
//	entry      u32     (0xFFFFFFFF when empty), top level u32
//	per node:  level u8, then for each level 0..level:
//	             count u8, count × (neighbour u32, distance f32)
//	checksum   u32     CRC-32C of everything before it
//
// A graph file of another generation (or none) makes the graph be rebuilt
// from the vectors, with a log line; one that fails its checksum or does not
// decode is an error naming it.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"slices"
	"time"
)

const (
	graphMagic    = "RAGTHNS1"
	graphFileName = "embedded.hnsw"
)

// writeGraph writes st's graph for the file layout given by order (the live
// slots in file order); the caller keeps st from changing. Deleted nodes
// are left out, their links repaired (see liveLinks).
func writeGraph(f io.Writer, st *state, dim int, order []int32, gen uint64) error {
	g := st.graph
	newID := make(map[int32]uint32, len(order))
	for i, s := range order {
		newID[s] = uint32(i)
	}
	crc := crc32.New(castagnoli)
	w := &fileWriter{w: bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)}
	w.bytes([]byte(graphMagic))
	w.u64(gen)
	w.u32(uint32(len(order)))
	entry, top := uint32(math.MaxUint32), 0
	if id, ok := newID[g.entry]; ok && g.entry >= 0 {
		entry, top = id, g.top
	} else {
		for _, s := range order { // the entry was deleted: promote the highest live node
			if l := g.level(s); entry == math.MaxUint32 || l > top {
				entry, top = newID[s], l
			}
		}
	}
	w.u32(entry)
	w.u32(uint32(top))
	buf := make([]byte, 0, 1+8*hnswCap0)
	for _, s := range order {
		lv := g.level(s)
		w.bytes([]byte{byte(lv)})
		for l := 0; l <= lv; l++ {
			buf = buf[:1]
			links := st.liveLinks(dim, s, l)
			for _, c := range links {
				buf = binary.LittleEndian.AppendUint32(buf, newID[c.s])
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(c.d))
			}
			buf[0] = byte(len(links))
			w.bytes(buf)
		}
	}
	return w.finish(f, crc)
}

// liveLinks returns s's neighbours on level l without the deleted ones,
// and in the room they and any spare capacity leave (up to the list's cap,
// 1.5 × M), the live nodes nearest to s found through the deleted ones (up
// to two deleted hops): the repair hnswlib makes when it drops a node. In
// memory deleted nodes keep routing searches; the file leaves them out, and
// without the repair a node reached only through replaced documents would
// be cut off. It costs inner products only for the nodes found, so a
// compaction after heavy churn stays a matter of seconds.
func (st *state) liveLinks(dim int, s int32, l int) []cand {
	g := st.graph
	ids, ds := g.neighbours(s, l), g.distances(s, l)
	out := make([]cand, 0, len(ids))
	var frontier []int32
	for i, t := range ids {
		if int(t) >= len(st.alive) {
			continue // linked after a compaction's freeze (copyFrozenLayer0)
		}
		if st.alive[t] {
			out = append(out, cand{ds[i], t})
		} else {
			frontier = append(frontier, t)
		}
	}
	if len(frontier) == 0 {
		return out
	}
	room := hnswCap - len(out)
	if l == 0 {
		room = hnswCap0 - len(out)
	}
	seen := map[int32]bool{s: true}
	for _, t := range ids {
		seen[t] = true
	}
	q := st.vecs.vec(s)
	var extra []cand
	for hop := 0; hop < 2 && len(frontier) > 0 && len(extra) < 2*room; hop++ {
		var next []int32
	walk:
		for _, d := range frontier {
			if g.level(d) < l {
				continue
			}
			for _, t := range g.neighbours(d, l) {
				if seen[t] || int(t) >= len(st.alive) {
					continue
				}
				seen[t] = true
				if st.alive[t] {
					extra = append(extra, cand{1 - simdDot(q, st.vecs.vec(t)), t})
					if len(extra) >= 2*room {
						break walk
					}
				} else {
					next = append(next, t)
				}
			}
		}
		frontier = next
	}
	sortCands(extra)
	return append(out, extra[:min(len(extra), room)]...)
}

// distances returns the distances stored beside s's neighbours on level l.
func (g *graph) distances(s int32, l int) []float32 {
	if l == 0 {
		return g.l0.distances(s)
	}
	return g.upper[s][l-1].dists
}

var errGraphStale = errors.New("graph file does not match the index file")

// readGraph loads the graph file for a state of n nodes saved at gen. The
// whole file's checksum is verified before anything in it is believed: a
// damaged file is an error wrapping ErrCorrupt that names it; a sound one
// of another generation or size (a compaction cut between its renames, an
// index saved with --store-exact) is errGraphStale.
func readGraph(path string, n int, gen uint64) (*graph, error) {
	if fi, err := os.Stat(path); err == nil {
		collectBefore(fi.Size()) // read whole: some 265 bytes a node
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	corrupt := func(what string) error {
		return fmt.Errorf("reading HNSW graph file %s: %s: %w (delete it to rebuild the graph from the vectors)", path, what, ErrCorrupt)
	}
	if len(data) < 8+8+4+4+4+4 {
		return nil, corrupt("file too short")
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(body):]) {
		return nil, corrupt("checksum mismatch")
	}
	r := &fileReader{r: bytes.NewReader(body), left: int64(len(body))}
	if string(r.bytes(len(graphMagic))) != graphMagic {
		return nil, corrupt("not a ragtime graph file")
	}
	if fileGen, nodes := r.u64(), int(r.u32()); fileGen != gen || nodes != n {
		return nil, fmt.Errorf("%w: %s holds generation %d of %d nodes, the index generation %d of %d", errGraphStale, path, fileGen, nodes, gen, n)
	}
	g := newGraph()
	g.grow(n)
	entry, top := r.u32(), int(r.u32())
	g.entry, g.top = -1, 0
	if entry != math.MaxUint32 {
		if int(entry) >= n {
			return nil, corrupt("entry point out of range")
		}
		g.entry, g.top = int32(entry), top
	}
	readList := func(limit int) ([]int32, []float32) {
		c := r.bytes(1)
		if c == nil {
			return nil, nil
		}
		cnt := int(c[0])
		if cnt > limit {
			r.err = fmt.Errorf("%d neighbours, at most %d allowed", cnt, limit)
			return nil, nil
		}
		b := r.bytes(8 * cnt)
		if b == nil {
			return nil, nil
		}
		ids, ds := make([]int32, cnt), make([]float32, cnt)
		for i := range cnt {
			id := binary.LittleEndian.Uint32(b[8*i:])
			if int(id) >= n {
				r.err = fmt.Errorf("neighbour %d out of range", id)
				return nil, nil
			}
			ids[i], ds[i] = int32(id), math.Float32frombits(binary.LittleEndian.Uint32(b[8*i+4:]))
		}
		return ids, ds
	}
	for s := range n {
		lb := r.bytes(1)
		if lb == nil {
			break
		}
		level := int(lb[0]) // read before the next read reuses the buffer
		ids, ds := readList(hnswCap0)
		lids, lds, count := g.l0.lists(int32(s))
		copy(lids, ids)
		copy(lds, ds)
		*count = uint8(len(ids))
		if lv := level; lv > 0 {
			ul := make([]nodeLinks, lv)
			for l := range ul {
				ul[l].ids, ul[l].dists = readList(hnswCap)
			}
			g.upper[int32(s)] = ul
		}
	}
	if r.err == nil && r.left != 0 {
		r.err = fmt.Errorf("%d bytes left over", r.left)
	}
	if r.err != nil {
		return nil, corrupt(r.err.Error())
	}
	return g, nil
}

// Linking in the background. Loading does not insert into the graph the
// chunks it has no graph for (those the log added since the snapshot, or
// all of them when the graph file is missing or of another generation):
// that would cost about a millisecond per chunk before the first search.
// It lists them in state.unlinked instead; searches scan those exactly and
// merge them with what the graph finds, and a goroutine links them in,
// a wave at a time, while searches and writes go on.

// linkWave is the number of unlinked chunks planned in parallel (under the
// read lock) and then linked (under the write lock) in one step.
const linkWave = 256

// linkStep is how many planned chunks are linked per hold of the write
// lock: linking one can take milliseconds (each of its neighbours may
// prune its own list).
const linkStep = 4

// liveFrom lists st's live slots from first on, in slot order (documents
// in the order they were stored, chunks in order).
func liveFrom(st *state, first int) []int32 {
	var out []int32
	for s := first; s < len(st.alive); s++ {
		if st.alive[s] {
			out = append(out, int32(s))
		}
	}
	return out
}

// linkSome links up to one wave of st's unlinked chunks into its graph and
// reports whether any remain. Neighbours are planned in parallel under the
// read lock; the links are made under writeMu (taken unless haveWriteMu)
// and the write lock. It stops when st is no longer the index's state.
func (ix *Index) linkSome(st *state, haveWriteMu bool) bool {
	dim := ix.dim
	ix.mu.RLock()
	if ix.st != st || len(st.unlinked) == 0 {
		ix.mu.RUnlock()
		return false
	}
	n := min(len(st.unlinked), linkWave)
	if st.graph.entry < 0 || len(st.alive)-len(st.unlinked) < 4*linkWave {
		n = min(n, 16) // plans against a near-empty graph are mostly redone below
	}
	part := slices.Clone(st.unlinked[:n])
	ix.mu.RUnlock()
	plans := make([]plan, n)
	// Planned planStep at a time per hold of the read lock (see plan).
	for lo := 0; lo < n; lo += planStep {
		hi := min(lo+planStep, n)
		ix.mu.RLock()
		if ix.st != st {
			ix.mu.RUnlock()
			return false
		}
		parallel(hi-lo, func(i int) {
			s := part[lo+i]
			if st.alive[s] {
				c := &st.chunks[s]
				plans[lo+i] = st.planInsert(dim, st.vecs.vec(s), levelFor(c.DocID, c.Index))
			}
		})
		ix.mu.RUnlock()
	}
	if !haveWriteMu {
		ix.writeMu.Lock()
		defer ix.writeMu.Unlock()
	}
	if ix.st == st { // the graph's arrays grow here, not under the write lock
		ix.reserve(0)
	}
	// Linked a few at a time, so no search waits behind a whole wave.
	for lo := 0; lo < n; lo += linkStep {
		ix.mu.Lock()
		if ix.st != st {
			ix.mu.Unlock()
			return false
		}
		hi := min(lo+linkStep, n)
		if len(st.unlinked) < hi-lo || st.unlinked[0] != part[lo] {
			// Another linker (a compaction's, the background one) took
			// these: plan afresh from what is left.
			more := len(st.unlinked) > 0
			ix.mu.Unlock()
			return more
		}
		st.graph.grow(len(st.alive))
		for i, s := range part[lo:hi] {
			if !st.alive[s] { // replaced or deleted since
				continue
			}
			c := &st.chunks[s]
			p := plans[lo+i]
			if p.links == nil && st.graph.entry >= 0 {
				p = st.planInsert(dim, st.vecs.vec(s), p.level)
			}
			// The document's earlier chunks, linked already: chunks of a
			// wave were planned without seeing each other.
			st.link(dim, s, p, st.recent(dim, s, st.docs[c.DocID].slots[:c.Index]))
		}
		st.unlinked = st.unlinked[hi-lo:]
		ix.mu.Unlock()
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.st == st && len(st.unlinked) > 0
}

// linkInBackground links st's unlinked chunks in a goroutine (Close waits
// for it) and logs when it is done; then runs after, if set.
func (ix *Index) linkInBackground(st *state, after func()) {
	ix.bgMu.Lock()
	if ix.closing {
		ix.bgMu.Unlock()
		return
	}
	ix.bg.Add(1)
	ix.bgMu.Unlock()
	ix.mu.RLock()
	n := len(st.unlinked)
	ix.mu.RUnlock()
	go func() {
		defer ix.bg.Done()
		start := time.Now()
		for ix.linkSome(st, false) {
			if ix.isClosing() {
				return
			}
		}
		ix.mu.RLock()
		done := ix.st == st && len(st.unlinked) == 0
		ix.mu.RUnlock()
		if !done {
			return // replaced by a newer state, or a compaction linked the rest
		}
		ix.logger.Info("linked the loaded chunks into the HNSW graph", "dir", ix.dir, "chunks", n,
			"took", time.Since(start).Round(time.Millisecond))
		if after != nil {
			after()
		}
	}()
}
