package postgres

import (
	"strconv"
	"testing"

	"ragtime/pipeline"
)

// TestRecordQueueKeepsOrder pushes and pops records through chunks,
// merged batches and recycled arrays: every record comes out once, in the
// order pushed, no batch exceeds its bound, and the count stays right.
func TestRecordQueueKeepsOrder(t *testing.T) {
	const size = 4
	var q recordQueue
	pushed, popped := 0, 0
	push := func(k int) {
		for range k {
			pushed++
			if n := q.push(pipeline.Record{QueryID: strconv.Itoa(pushed)}, size); n != pushed-popped {
				t.Fatalf("push returned %d queued, want %d", n, pushed-popped)
			}
		}
	}
	pop := func(max int) int {
		b := q.popUpTo(max)
		if len(b) > max && len(b) > size {
			t.Fatalf("popped %d records, bound %d", len(b), max)
		}
		for _, r := range b {
			popped++
			if r.QueryID != strconv.Itoa(popped) {
				t.Fatalf("popped record %s, want %d", r.QueryID, popped)
			}
		}
		clear(b)
		q.recycle(b[:0], size)
		return len(b)
	}
	push(3)
	if q.frontFull(size) {
		t.Fatal("front full with 3 of 4")
	}
	if n := pop(16); n != 3 {
		t.Fatalf("popped %d, want the 3 waiting", n)
	}
	push(1) // a chunk of its own: the popped one is no longer appended to
	push(17)
	if !q.frontFull(size) {
		t.Fatal("front not full with 18 waiting")
	}
	if n := pop(16); n != 16 {
		t.Fatalf("popped %d, want 4 chunks", n)
	}
	if n := pop(3); n != 2 { // the last chunk, short
		t.Fatalf("popped %d, want the last 2", n)
	}
	push(9)
	for q.n > 0 {
		pop(8)
	}
	if pushed != popped || len(q.chunks) != 0 {
		t.Fatalf("pushed %d, popped %d, %d chunks left", pushed, popped, len(q.chunks))
	}
	if len(q.free) == 0 || len(q.free) > maxFreeChunks {
		t.Fatalf("%d chunks kept for reuse", len(q.free))
	}
}
