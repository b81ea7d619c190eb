package postgres

import (
	"ragtime"
)

// recordQueue is the recorder's memory queue. It holds records in chunks
// of BatchSize, oldest first, so that Record copies a record once (into
// its chunk) and a writer takes a whole chunk as its batch: a growing
// slice would copy every queued record again at each growth (records are
// about 470 bytes), and under a backlog of thousands that copying cost
// more CPU than encoding them. Chunks the writers have finished with come
// back, cleared, for the records to come. Not safe for concurrent use: the
// recorder holds its mutex.
type recordQueue struct {
	chunks [][]ragtime.Record // oldest first; only the last may have room
	n      int                // records in chunks
	free   [][]ragtime.Record // empty chunks to reuse
}

// maxFreeChunks bounds the empty chunks the queue keeps for reuse: about
// what the writers hold at once (two each: one written, one encoded).
const maxFreeChunks = 4

// push appends rec, starting a chunk of size records when the last one is
// full, and returns how many records the queue holds.
func (q *recordQueue) push(rec ragtime.Record, size int) int {
	k := len(q.chunks)
	if k == 0 || len(q.chunks[k-1]) == cap(q.chunks[k-1]) {
		var c []ragtime.Record
		if f := len(q.free); f > 0 {
			c = q.free[f-1]
			q.free[f-1] = nil
			q.free = q.free[:f-1]
		} else {
			c = make([]ragtime.Record, 0, size)
		}
		q.chunks = append(q.chunks, c)
		k++
	}
	q.chunks[k-1] = append(q.chunks[k-1], rec)
	q.n++
	return q.n
}

// frontFull reports whether the oldest chunk holds size records.
func (q *recordQueue) frontFull(size int) bool {
	return len(q.chunks) > 0 && len(q.chunks[0]) >= size
}

// pop removes and returns the oldest chunk (nil when the queue is empty).
// The queue no longer reaches it: a record pushed next starts a chunk of
// its own.
func (q *recordQueue) pop() []ragtime.Record {
	if len(q.chunks) == 0 {
		return nil
	}
	c := q.chunks[0]
	q.chunks[0] = nil
	q.chunks = q.chunks[1:]
	if len(q.chunks) == 0 {
		q.chunks = nil
	}
	q.n -= len(c)
	return c
}

// popUpTo removes and returns the oldest chunks that together hold at
// most max records (at least one chunk, nil when the queue is empty). One
// chunk is returned as it is; several are copied into one array and
// recycled.
func (q *recordQueue) popUpTo(max int) []ragtime.Record {
	c := q.pop()
	if len(q.chunks) == 0 || len(c)+len(q.chunks[0]) > max {
		return c
	}
	size := cap(c)
	batch := make([]ragtime.Record, 0, max)
	batch = append(batch, c...)
	clear(c)
	q.recycle(c[:0], size)
	for len(q.chunks) > 0 && len(batch)+len(q.chunks[0]) <= max {
		c = q.pop()
		batch = append(batch, c...)
		clear(c)
		q.recycle(c[:0], size)
	}
	return batch
}

// recycle keeps c, an emptied chunk popped before, for reuse when it has
// room for size records and fewer than maxFreeChunks are kept.
func (q *recordQueue) recycle(c []ragtime.Record, size int) {
	if cap(c) == size && len(c) == 0 && len(q.free) < maxFreeChunks {
		q.free = append(q.free, c)
	}
}

// reset empties the queue (its records were spooled or abandoned).
func (q *recordQueue) reset() {
	q.chunks = nil
	q.n = 0
}
