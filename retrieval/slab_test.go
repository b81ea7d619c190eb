package retrieval

import (
	"slices"
	"testing"
)

// slabFloats returns the floats of v's slots in use, in slot order.
func slabFloats(v *slab) []float32 {
	var out []float32
	v.pageRange(func(f []float32) bool {
		out = append(out, f...)
		return true
	})
	return out
}

// TestSlab grows a slab past several pages by push and by newPages, and
// checks each slot keeps its own vector, a frozen copy keeps what it saw,
// and pages stay within their bounds.
func TestSlab(t *testing.T) {
	t.Parallel()
	for _, dim := range []int{1, 3, 512, 4096, 100_000} {
		v := makeSlab(dim, 0, 0)
		per := 1 << v.shift
		if per*dim*4 > slabPageBytes && per > 1 || per > slabPageSlots {
			t.Fatalf("dim %d: %d slots a page (%d bytes)", dim, per, per*dim*4)
		}
		fill := func(s int32) {
			vec := v.vec(s)
			for i := range vec {
				vec[i] = float32(int(s)*7 + i)
			}
		}
		n := 2*per + 3
		for range n {
			fill(v.push())
		}
		frozen := v.frozen()
		want := slabFloats(&frozen)
		v.addPages(v.newPages(v.len() + 3*per))
		if v.capacity() < n+3*per {
			t.Fatalf("dim %d: capacity %d after newPages for %d", dim, v.capacity(), n+3*per)
		}
		for range per + 1 {
			fill(v.push())
		}
		if got := slabFloats(&frozen); !slices.Equal(got, want) || frozen.len() != n {
			t.Fatalf("dim %d: the frozen copy changed", dim)
		}
		for s := range int32(v.len()) {
			vec := v.vec(s)
			if len(vec) != dim || cap(vec) != dim || vec[0] != float32(int(s)*7) || vec[dim-1] != float32(int(s)*7+dim-1) {
				t.Fatalf("dim %d: slot %d holds %d floats starting %v", dim, s, len(vec), vec[0])
			}
		}
		m := makeSlab(dim, 5, per)
		if m.len() != 5 || m.capacity() < 5+per || len(slabFloats(&m)) != 5*dim {
			t.Fatalf("dim %d: makeSlab(5, %d): len %d, capacity %d", dim, per, m.len(), m.capacity())
		}
	}
}
