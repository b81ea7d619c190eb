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
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

const (
	graphMagic    = "RAGTHNS1"
	graphFileName = "embedded.hnsw"
)

// writeGraph writes st's graph for the file layout given by order (the live
// slots in file order); the caller keeps st from changing. Deleted nodes
// are left out, their links repaired (see liveLinks).
func writeGraph(f *os.File, st *state, dim int, order []int32, gen uint64) error {
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

// liveLinks returns s's neighbours on level l with the deleted ones
// replaced by live nodes found through them (up to two deleted hops), then
// pruned back to M (M0 on layer 0) with the selection heuristic: the
// repair hnswlib makes when it drops a node. In memory deleted nodes keep
// routing searches; the file leaves them out, and without the repair a
// node whose neighbours were mostly replaced documents would be cut off.
func (st *state) liveLinks(dim int, s int32, l int) []cand {
	g := st.graph
	ids, ds := g.neighbours(s, l), g.distances(s, l)
	out := make([]cand, 0, len(ids))
	var frontier []int32
	for i, t := range ids {
		if st.alive[t] {
			out = append(out, cand{ds[i], t})
		} else {
			frontier = append(frontier, t)
		}
	}
	if len(frontier) == 0 {
		return out
	}
	seen := map[int32]bool{s: true}
	for _, t := range ids {
		seen[t] = true
	}
	q := st.vecs[int(s)*dim : (int(s)+1)*dim]
	for hop := 0; hop < 2 && len(frontier) > 0; hop++ {
		var next []int32
		for _, d := range frontier {
			if g.level(d) < l {
				continue
			}
			for _, t := range g.neighbours(d, l) {
				if seen[t] {
					continue
				}
				seen[t] = true
				if st.alive[t] {
					out = append(out, cand{1 - simdDot(q, st.vecs[int(t)*dim:(int(t)+1)*dim]), t})
				} else {
					next = append(next, t)
				}
			}
		}
		frontier = next
	}
	m := hnswM
	if l == 0 {
		m = hnswM0
	}
	sortCands(out)
	return st.selectNeighbours(dim, out, m)
}

// distances returns the distances stored beside s's neighbours on level l.
func (g *graph) distances(s int32, l int) []float32 {
	if l == 0 {
		o := int(s) * hnswCap0
		return g.dists0[o : o+int(g.count0[s])]
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
		o := s * hnswCap0
		copy(g.links0[o:], ids)
		copy(g.dists0[o:], ds)
		g.count0[s] = uint8(len(ids))
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

// buildGraph inserts every live slot of st into a fresh graph (see
// linkFrom).
func buildGraph(st *state, dim int) {
	st.graph = newGraph()
	linkFrom(st, dim, 0)
}

// linkFrom inserts the live slots from first on into st's graph, document
// by document in slot order: neighbours are planned in parallel against the
// graph built so far, a wave at a time, then linked one by one. Loading
// uses it for a whole index (first 0) and for the documents a replayed log
// added (first: the slab size before the replay). st must not be visible
// to searches yet.
func linkFrom(st *state, dim int, first int32) {
	st.graph.grow(len(st.alive))
	type item struct {
		slot  int32
		level int
		batch []int32 // earlier slots of the same document
	}
	var items []item
	docs := make([]string, 0, len(st.docs))
	for id, e := range st.docs {
		if len(e.slots) > 0 && e.slots[0] >= first {
			docs = append(docs, id)
		}
	}
	slices.SortFunc(docs, func(a, b string) int {
		return int(st.docs[a].slots[0] - st.docs[b].slots[0])
	})
	for _, id := range docs {
		slots := st.docs[id].slots
		for i, s := range slots {
			items = append(items, item{slot: s, level: levelFor(id, i), batch: slots[:i]})
		}
	}
	const wave = 256
	workers := runtime.GOMAXPROCS(0)
	plans := make([]plan, wave)
	for lo := 0; lo < len(items); lo += wave {
		part := items[lo:min(lo+wave, len(items))]
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(part); i = int(next.Add(1) - 1) {
					it := part[i]
					plans[i] = st.planInsert(dim, st.vecs[int(it.slot)*dim:(int(it.slot)+1)*dim], it.level)
				}
			})
		}
		wg.Wait()
		for i, it := range part {
			p := plans[i]
			if p.links == nil && st.graph.entry >= 0 {
				p = st.planInsert(dim, st.vecs[int(it.slot)*dim:(int(it.slot)+1)*dim], it.level)
			}
			// Nodes of this wave planned without seeing each other: link
			// each to the wave's earlier nodes of its document as well.
			st.link(dim, it.slot, p, it.batch)
		}
	}
}
