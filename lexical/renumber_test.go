package lexical

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestRenumberedIsWhatAddBuilds: the view of an index taken part way (ids
// added after it are left out), with some chunks deleted and the rest
// given new ids in another order, renumbers into exactly the index that
// adding those chunks' Docs in their new order builds.
func TestRenumberedIsWhatAddBuilds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	words := make([]string, 300)
	for i := range words {
		words[i] = fmt.Sprintf("word%d", i)
	}
	doc := func() Doc {
		var text []byte
		for range 5 + r.IntN(60) {
			text = fmt.Appendf(text, "%s ", words[int(r.ExpFloat64()*40)%len(words)])
		}
		return Analyse(fmt.Sprintf("title %d", r.IntN(9)), string(text))
	}
	x := NewIndex()
	var docs []Doc
	for i := range 2000 {
		d := doc()
		docs = append(docs, d)
		x.Add(d, int32(i))
	}
	limit := x.Docs()
	for i := range 500 { // after the view's snapshot: left out
		x.Add(doc(), int32(limit+i))
	}
	view := x.View(limit)
	for range 200 { // added after the view was taken: not in it either
		x.Add(doc(), -1)
	}
	// Keep three quarters, in a shuffled order.
	var kept []int
	for old := range limit {
		if r.IntN(4) > 0 {
			kept = append(kept, old)
		}
	}
	r.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	newID := make([]int32, limit)
	for i := range newID {
		newID[i] = -1
	}
	want := NewIndex()
	for nw, old := range kept {
		newID[old] = int32(nw)
		want.Add(docs[old], int32(nw))
	}
	got := view.Renumbered(newID, len(kept))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("renumbered: %d terms, %d chunks (%d live, total %d); Add: %d terms, %d chunks (%d live, total %d)",
			len(got.terms), got.Docs(), got.Len(), got.total, len(want.terms), want.Docs(), want.Len(), want.total)
	}
}
