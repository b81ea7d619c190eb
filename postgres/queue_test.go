package postgres

import (
	"strconv"
	"testing"
	"time"

	"ragtime"
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
			if n := q.push(ragtime.Record{QueryID: strconv.Itoa(pushed)}, size); n != pushed-popped {
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

// TestEncodeIntoSharedBufferMatchesNewRow encodes a batch with invalid
// records between valid ones into a reused, dirty buffer: every valid row's
// bytes are newRow's, and the invalid ones are reported by index.
func TestEncodeIntoSharedBufferMatchesNewRow(t *testing.T) {
	rec := func(id string, attrs map[string]any) ragtime.Record {
		return ragtime.Record{QueryID: id, CreatedAt: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC), Question: "q " + id, Model: "m",
			Stages: []ragtime.Span{{Name: "embed", Seq: 0, DurationMs: 1.5, Attrs: attrs}, {Name: "search", Seq: 1, Attrs: map[string]any{"k": 4.0}}}}
	}
	recs := []ragtime.Record{
		rec("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a51", map[string]any{"texts": 1.0}),
		rec("not-a-uuid", nil),
		rec("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a52", map[string]any{"bad": make(chan int)}),
		rec("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a53", map[string]any{"nested": map[string]any{"a": []any{1.0, "x"}}}),
	}
	dirty := make([]byte, 100, 160)
	for i := range dirty {
		dirty[i] = 0xAA
	}
	e := encode(recs, dirty[:0])
	if len(e.invalid) != 2 || e.invalid[0].i != 1 || e.invalid[1].i != 2 {
		t.Fatalf("invalid = %+v, want records 1 and 2", e.invalid)
	}
	if len(e.rows) != 2 || e.at[0] != 0 || e.at[1] != 3 {
		t.Fatalf("rows of records %v, want 0 and 3", e.at)
	}
	for k, i := range e.at {
		want, err := newRow(&recs[i])
		if err != nil {
			t.Fatal(err)
		}
		got := e.rows[k]
		if string(got.query) != string(want.query) || got.id != want.id || got.queryID != want.queryID || got.rec != &recs[i] {
			t.Errorf("record %d: queries row differs from newRow's", i)
		}
		if len(want.rec.Stages[0].Attrs) == 1 && string(got.stages) != string(want.stages) {
			t.Errorf("record %d: stage rows differ from newRow's", i)
		}
		if len(got.stages) != len(want.stages) {
			t.Errorf("record %d: stage rows %d bytes, newRow's %d", i, len(got.stages), len(want.stages))
		}
	}
}
