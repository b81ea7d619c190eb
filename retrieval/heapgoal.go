package retrieval

// Why a large allocation may collect first: Go's collector paces itself
// toward a heap goal (twice the heap live after the last collection at
// GOGC=100). One allocation that takes most of the runway to that goal in
// a single step leaves the collector none: it starts at once, and every
// goroutine that allocates while it marks is made to mark in proportion to
// the overshoot. A search allocating its few kilobytes of hits was drafted
// for the whole mark of a 700 MB heap (120 ms; `go test -trace` on
// SearchDuringUpload300MB showed it: the heap jumped from 415 to 708 MB
// past a 618 MB goal when the vector slab of the time, one array, grew
// into a larger copy, and the search ran mark assists until the cycle
// ended). The slab and the graph's layer 0 now grow by pages (slab.go,
// layer0.go); the arrays that still grow by copy (chunks, liveness,
// lexical ids: some 100 bytes a chunk) and a graph file read whole still
// allocate a hundred megabytes or more at a time at a million chunks. Collecting
// first, on the goroutine about to allocate (a writer, a compaction, a
// reload: no search waits for it), moves the goal past the allocation, so
// the next cycle is paced normally.

import (
	"runtime"
	"runtime/metrics"
)

// collectBeforeMin is the smallest allocation that collectBefore looks
// at: below it an overshoot is small enough for the pacer to absorb.
const collectBeforeMin = 32 << 20

// collectBefore runs a garbage collection when allocating bytes would take
// more than half of the runway left to the collector's goal (see above:
// an allocation that lands just short of the goal starts a cycle with no
// runway as well), and reports whether it did.
func collectBefore(bytes int64) bool {
	if bytes < collectBeforeMin {
		return false
	}
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return false
	}
	goal, heap := s[0].Value.Uint64(), s[1].Value.Uint64()
	if heap < goal && uint64(bytes) <= (goal-heap)/2 {
		return false
	}
	runtime.GC()
	return true
}
