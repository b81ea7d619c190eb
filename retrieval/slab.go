package retrieval

import "math/bits"

// slab holds the index's vectors, slot s's at vec(s), in pages of a fixed
// number of slots (a power of two, up to slabPageBytes a page). Growing it
// allocates pages and copies nothing: a single array had to be copied
// whole into a larger one, hundreds of megabytes at a few hundred thousand
// chunks, made while writers waited, doubling the slab's memory for a
// moment and taking the heap past the collector's goal in one allocation
// (heapgoal.go). A frozen copy (freeze) shares the pages; writers leave the
// slots it reads alone.
type slab struct {
	dim   int
	shift uint        // log2 of the slots a page holds
	pages [][]float32 // each (1<<shift)*dim floats
	n     int         // slots in use: vec(s) for s < n
}

// slabPageBytes bounds a page: 4 MiB is 2,048 vectors of 512 dimensions.
// slabPageSlots bounds the slots of a page of small vectors.
const (
	slabPageBytes = 4 << 20
	slabPageSlots = 4096
)

// makeSlab returns a slab of dim-dimensional vectors holding n (zeroed)
// slots, with pages for extra more.
func makeSlab(dim, n, extra int) slab {
	shift := uint(bits.Len(uint(max(1, min(slabPageSlots, slabPageBytes/(4*max(dim, 1)))))) - 1)
	v := slab{dim: dim, shift: shift}
	v.pages = v.newPages(n + extra)
	v.n = n
	return v
}

// vec returns slot s's vector (s < len()), capped so an append cannot
// reach the next slot's.
func (v *slab) vec(s int32) []float32 {
	p := v.pages[int(s)>>v.shift]
	o := (int(s) & (1<<v.shift - 1)) * v.dim
	return p[o : o+v.dim : o+v.dim]
}

// len returns the number of slots in use.
func (v *slab) len() int { return v.n }

// capacity returns the number of slots its pages hold.
func (v *slab) capacity() int { return len(v.pages) << v.shift }

// newPages returns the pages that give v room for n slots in all (none
// when it has them), for the caller to add with addPages: a writer
// allocates them before it takes the lock searches wait for.
func (v *slab) newPages(n int) [][]float32 {
	per := 1 << v.shift
	k := (n - v.capacity() + per - 1) / per
	if k <= 0 {
		return nil
	}
	out := make([][]float32, k)
	for i := range out {
		out[i] = make([]float32, per*v.dim)
	}
	return out
}

// addPages appends pages made by newPages.
func (v *slab) addPages(p [][]float32) { v.pages = append(v.pages, p...) }

// push adds a slot at the end, adding a page when the last one is full,
// and returns it; its vector is zero.
func (v *slab) push() int32 {
	if v.n == v.capacity() {
		v.addPages(v.newPages(v.n + 1))
	}
	v.n++
	return int32(v.n - 1)
}

// frozen returns a copy of v that shares its pages: pushes to v after it
// write only slots past the copy's end, and pages they add are v's alone.
func (v *slab) frozen() slab {
	f := *v
	f.pages = v.pages[:len(v.pages):len(v.pages)]
	return f
}

// pageRange calls fn with the floats of the slots in use, page by page,
// in slot order, until it returns false.
func (v *slab) pageRange(fn func(floats []float32) bool) {
	per := 1 << v.shift
	for i, p := range v.pages {
		n := min(per, v.n-i*per)
		if n <= 0 || !fn(p[:n*v.dim]) {
			return
		}
	}
}
