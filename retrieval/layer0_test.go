package retrieval

import (
	"slices"
	"testing"
)

// TestLayer0 grows a layer 0 across page boundaries, fills every slot's
// list, copies ranges that straddle pages into another, and checks every
// list comes back as written and newPages adds room without slots.
func TestLayer0(t *testing.T) {
	t.Parallel()
	per := 1 << layer0Shift
	n := 2*per + 5
	var z layer0
	z.grow(n)
	want := func(s int32) []int32 {
		out := make([]int32, int(s)%(hnswCap0+1))
		for i := range out {
			out[i] = s*7 + int32(i)
		}
		return out
	}
	for s := range int32(n) {
		ids, ds, c := z.lists(s)
		w := want(s)
		copy(ids, w)
		for i := range w {
			ds[i] = float32(w[i]) / 2
		}
		*c = uint8(len(w))
	}
	var y layer0
	y.grow(n)
	for _, r := range [][2]int{{0, 3}, {3, per + 10}, {per + 10, 2*per + 1}, {2*per + 1, n}} {
		y.copyRange(&z, r[0], r[1])
	}
	for s := range int32(n) {
		if !slices.Equal(z.ids(s), want(s)) || !slices.Equal(y.ids(s), want(s)) || !slices.Equal(y.distances(s), z.distances(s)) {
			t.Fatalf("slot %d: ids %v, copied %v, want %v", s, z.ids(s), y.ids(s), want(s))
		}
	}
	z.addPages(z.newPages(n + per))
	if z.n != n || z.capacity() < n+per || len(z.newPages(n+per).counts) != 0 {
		t.Fatalf("after newPages: %d slots, capacity %d", z.n, z.capacity())
	}
}
