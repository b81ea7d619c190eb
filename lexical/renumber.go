package lexical

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
)

// View is an Index's postings as they stood when View was taken, for
// Renumbered to read while the index goes on taking chunks: postings are
// only ever appended to, so the bytes a View holds never change, and the
// ids it reads stop at the number of ids given when the caller's snapshot
// of its own chunks was taken.
type View struct {
	ids   int
	terms []string
	data  [][]byte
	lens  []uint32
}

// View returns the postings of x's first ids ids (ids ≤ Docs()). It costs
// one slice header per term, and the caller must keep writers out while
// it runs (the embedded store's read lock).
func (x *Index) View(ids int) View {
	v := View{ids: ids, terms: make([]string, 0, len(x.terms)), data: make([][]byte, 0, len(x.terms)), lens: x.lens[:ids:ids]}
	for t, p := range x.terms {
		v.terms = append(v.terms, t)
		v.data = append(v.data, p.data[:len(p.data):len(p.data)])
	}
	return v
}

// renumberYield is how many postings a Renumbered worker goes through
// (about a millisecond's worth) before it lets other goroutines run.
const renumberYield = 1 << 16

// Ids returns how many ids the view holds: Renumbered's newID has as many
// entries.
func (v View) Ids() int { return v.ids }

// Renumbered returns an index of n chunks holding, under id newID[old]
// (and caller's number the same), the postings and length of the view's
// id old, for every old id whose newID is not negative: what Add would
// build from those chunks' Docs added in their new order, without
// analysing their text again. A compaction renumbers the lexical index
// this way. newID has one entry per id of the view, and maps onto 0..n-1.
func (v View) Renumbered(newID []int32, n int) *Index {
	y := &Index{bm25: NewBM25(), terms: make(map[string]*postings, len(v.terms)), ext: make([]int32, n), lens: make([]uint32, n), live: n}
	for i := range y.ext {
		y.ext[i] = int32(i)
	}
	for old, id := range newID[:v.ids] {
		if id >= 0 {
			y.lens[id] = v.lens[old]
		}
	}
	for _, l := range y.lens {
		y.total += uint64(l)
	}
	out := make([]*postings, len(v.terms))
	workers := max(1, min(runtime.GOMAXPROCS(0), len(v.terms)/256))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			type posting struct{ id, tf uint32 }
			var ps []posting
			read := 0 // postings read since the last yield
			for i := w; i < len(v.terms); i += workers {
				if read >= renumberYield {
					// A compaction runs this beside a serving index: a
					// write or a search waiting for a core gets one now
					// rather than at the end of the scheduler's slice.
					runtime.Gosched()
					read = 0
				}
				read += len(v.data[i]) / 2 // two bytes or more a posting
				ps = ps[:0]
				id := uint32(0)
				for data := v.data[i]; len(data) > 0; {
					gap, g := binary.Uvarint(data)
					tf, f := binary.Uvarint(data[g:])
					data = data[g+f:]
					id += uint32(gap)
					if int(id) >= v.ids {
						break // added after the caller's snapshot
					}
					if nid := newID[id]; nid >= 0 {
						ps = append(ps, posting{uint32(nid), uint32(tf)})
					}
				}
				if len(ps) == 0 {
					continue
				}
				slices.SortFunc(ps, func(a, b posting) int { return int(a.id) - int(b.id) })
				p := &postings{}
				for _, e := range ps {
					gap := e.id - p.last
					if p.df == 0 {
						gap = e.id
					}
					p.data = binary.AppendUvarint(p.data, uint64(gap))
					p.data = binary.AppendUvarint(p.data, uint64(e.tf))
					p.last = e.id
					p.df++
				}
				out[i] = p
			}
		})
	}
	wg.Wait()
	for i, p := range out {
		if p != nil {
			y.terms[v.terms[i]] = p
		}
	}
	return y
}
