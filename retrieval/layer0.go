package retrieval

// layer0 is an HNSW graph's layer 0: each slot's neighbour ids and their
// distances (up to hnswCap0 of each) and how many it has, in pages of
// 1<<layer0Shift slots, so that growing it allocates pages and copies
// nothing, like the vector slab (slab.go): at a million chunks the flat
// arrays it replaces were 256 MB, copied whole while writers waited.
type layer0 struct {
	links  [][]int32
	dists  [][]float32
	counts [][]uint8
	n      int // slots in use
}

// layer0Shift sets a page to 4,096 slots: 512 KiB of ids and as much of
// distances.
const layer0Shift = 12

// layer0Pages are pages made by newPages, for addPages.
type layer0Pages struct {
	links  [][]int32
	dists  [][]float32
	counts [][]uint8
}

// lists returns slot s's whole list arrays (hnswCap0 long, the first
// *count in use) and its count, to read or change in place.
func (z *layer0) lists(s int32) (ids []int32, dists []float32, count *uint8) {
	p, i := int(s)>>layer0Shift, int(s)&(1<<layer0Shift-1)
	o := i * hnswCap0
	return z.links[p][o : o+hnswCap0 : o+hnswCap0], z.dists[p][o : o+hnswCap0 : o+hnswCap0], &z.counts[p][i]
}

// ids returns slot s's neighbour ids (a search's inner loop: it slices
// the ids alone).
func (z *layer0) ids(s int32) []int32 {
	p, i := int(s)>>layer0Shift, int(s)&(1<<layer0Shift-1)
	o := i * hnswCap0
	return z.links[p][o : o+int(z.counts[p][i])]
}

// distances returns the distances beside slot s's neighbour ids.
func (z *layer0) distances(s int32) []float32 {
	p, i := int(s)>>layer0Shift, int(s)&(1<<layer0Shift-1)
	o := i * hnswCap0
	return z.dists[p][o : o+int(z.counts[p][i])]
}

// capacity returns the number of slots its pages hold.
func (z *layer0) capacity() int { return len(z.counts) << layer0Shift }

// newPages returns the pages that give z room for n slots in all (none
// when it has them), for addPages: a writer allocates them before it takes
// the lock searches wait for.
func (z *layer0) newPages(n int) layer0Pages {
	per := 1 << layer0Shift
	k := (n - z.capacity() + per - 1) / per
	var p layer0Pages
	for range k {
		p.links = append(p.links, make([]int32, per*hnswCap0))
		p.dists = append(p.dists, make([]float32, per*hnswCap0))
		p.counts = append(p.counts, make([]uint8, per))
	}
	return p
}

// addPages appends pages made by newPages.
func (z *layer0) addPages(p layer0Pages) {
	z.links = append(z.links, p.links...)
	z.dists = append(z.dists, p.dists...)
	z.counts = append(z.counts, p.counts...)
}

// grow makes z hold n slots (new ones with no neighbours).
func (z *layer0) grow(n int) {
	if n <= z.n {
		return
	}
	z.addPages(z.newPages(n))
	z.n = n
}

// copyRange copies the lists of slots lo to hi-1 from src into z, which
// holds at least hi slots.
func (z *layer0) copyRange(src *layer0, lo, hi int) {
	per := 1 << layer0Shift
	for lo < hi {
		p, i := lo>>layer0Shift, lo&(per-1)
		m := min(hi-lo, per-i)
		copy(z.links[p][i*hnswCap0:(i+m)*hnswCap0], src.links[p][i*hnswCap0:(i+m)*hnswCap0])
		copy(z.dists[p][i*hnswCap0:(i+m)*hnswCap0], src.dists[p][i*hnswCap0:(i+m)*hnswCap0])
		copy(z.counts[p][i:i+m], src.counts[p][i:i+m])
		lo += m
	}
}
