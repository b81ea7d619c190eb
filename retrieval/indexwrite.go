package retrieval

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"ragtime/pipeline"
)

// The embedded index's write path: replacing and deleting a document,
// planning its vectors' places in the graph and linking them.

// ReplaceDocument stores doc, replacing every chunk previously stored under
// its DocID in one step. A document without chunks is recorded (with its
// hash) but never found by a search.
func (ix *Index) ReplaceDocument(ctx context.Context, doc Document) error {
	return ix.ReplaceDocuments(ctx, []Document{doc})
}

// ReplaceDocuments stores docs in order, each as ReplaceDocument stores
// one: every document is appended to the log and becomes visible whole, one
// after the other. What it adds is that the graph neighbours of all their
// chunks are searched for at once, across the cores, against the graph as
// it was before the first (each chunk is also linked to the nearest of the
// batch's chunks before it, which that search could not see), so a bulk
// ingest of small documents keeps every core busy, and the graph depends
// only on the batches, not on how many cores built it. When a document
// cannot be stored, the error names it; the ones before it are stored, none
// after it. Nothing is stored when a document is invalid.
func (ix *Index) ReplaceDocuments(ctx context.Context, docs []Document) error {
	if len(docs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("replacing document %q: %w", docs[0].DocID, err)
	}
	if !ix.writable {
		return fmt.Errorf("replacing document %q: %w", docs[0].DocID, ErrReadOnly)
	}
	// Everything is prepared outside the lock, so searches wait only for
	// the slot bookkeeping and a copy.
	recs := make([]*logRecord, len(docs))
	frames := make([][]byte, len(docs))
	errs := make([]error, len(docs))
	workers := runtime.GOMAXPROCS(0) // one document: its chunks across the cores
	if len(docs) > 1 {
		workers = 1 // many: the documents across the cores
	}
	parallel(len(docs), func(i int) { recs[i], frames[i], errs[i] = ix.record(docs[i], workers) })
	for _, err := range errs {
		if err != nil {
			return err
		}
	}

	// With a graph, the expensive part of inserting (finding each vector's
	// neighbours) runs under the read lock, before the writer lock, so
	// searches and other writers' planning go on meanwhile.
	var plans []plan
	var planned *state
	if !ix.exact {
		plans, planned = ix.plan(recs)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.log == nil {
		return fmt.Errorf("replacing document %q: the index was closed", docs[0].DocID)
	}
	if !ix.exact && planned != ix.st { // a compaction renumbered the slots since
		plans, _ = ix.plan(recs)
	}
	var batch []int32 // the slots of the batch's chunks stored so far
	for i, rec := range recs {
		if err := ix.log.append(frames[i]); err != nil {
			if i > 0 {
				return fmt.Errorf("replacing document %q (%d documents of the batch stored before it): %w", rec.docID, i, err)
			}
			return fmt.Errorf("replacing document %q: %w", rec.docID, err)
		}
		ix.reserve(len(rec.chunks))
		var own []plan
		if plans != nil {
			own = plans[len(batch) : len(batch)+len(rec.chunks)]
		}
		batch = ix.upsert(rec, own, batch)
		if ix.catching {
			ix.pending = append(ix.pending, rec)
		}
		ix.maybeCompact()
	}
	ix.startGraph()
	return nil
}

// record checks doc and makes its log record (vectors normalised, chunks
// numbered, text analysed for the lexical leg on up to workers goroutines)
// and the record's frame.
func (ix *Index) record(doc Document, workers int) (*logRecord, []byte, error) {
	if doc.DocID == "" {
		return nil, nil, fmt.Errorf("replacing document: empty doc id")
	}
	if len(doc.Chunks) != len(doc.Vectors) {
		return nil, nil, fmt.Errorf("replacing document %q: %d chunks but %d vectors", doc.DocID, len(doc.Chunks), len(doc.Vectors))
	}
	vecs := make([]float32, len(doc.Vectors)*ix.dim)
	for i, v := range doc.Vectors {
		if len(v) != ix.dim {
			return nil, nil, fmt.Errorf("replacing document %q: chunk %d has %d dimensions, index has %d: %w",
				doc.DocID, i, len(v), ix.dim, ErrDimension)
		}
		if !normaliseInto(vecs[i*ix.dim:(i+1)*ix.dim], v) {
			return nil, nil, fmt.Errorf("replacing document %q: chunk %d has a NaN or infinite component", doc.DocID, i)
		}
	}
	chunks := make([]pipeline.Chunk, len(doc.Chunks))
	for i, c := range doc.Chunks {
		c.Index = i
		c.ID = ChunkID(doc.DocID, i)
		c.DocID = doc.DocID
		if c.Title == "" {
			c.Title = doc.Title
		}
		c.Metadata = maps.Clone(c.Metadata)
		chunks[i] = c
	}
	rec := &logRecord{op: opUpsert, docID: doc.DocID, title: doc.Title, hash: doc.ContentHash, chunks: chunks, vecs: vecs,
		lex: analyseAll(chunks, workers)}
	return rec, encodeRecord(ix.dim, rec), nil
}

// upsert stores rec in the visible state, linking its chunks into the
// graph with plans (made by ix.plan against the current state, as part of
// a batch whose chunks stored before rec's have the slots batch). The
// document becomes visible whole in one hold of the write lock; its chunks
// are then linked in holds of about linkHold each (linking one chunk can
// take milliseconds: each of its neighbours may prune its own list),
// searches scanning those not linked yet (st.linking), so a large document
// never holds searches up for long. It returns batch with rec's slots
// added. The caller holds writeMu.
func (ix *Index) upsert(rec *logRecord, plans []plan, batch []int32) []int32 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	st := ix.st
	slots := st.put(ix.dim, rec)
	ix.version++
	batch = append(batch, slots...)
	if st.graph == nil {
		return batch
	}
	st.linking = slots
	held := time.Now()
	var near []cand
	for i, slot := range slots {
		if i > 0 && time.Since(held) >= linkHold {
			ix.mu.Unlock()
			ix.mu.Lock()
			held = time.Now()
		}
		p := plans[i]
		if p.links == nil && len(p.near) == 0 && st.graph.entry >= 0 {
			// Planned against an empty graph that has filled since.
			p = st.planInsert(ix.dim, rec.vecs[i*ix.dim:(i+1)*ix.dim], p.level)
		}
		near = near[:0]
		for _, c := range p.near {
			near = append(near, cand{c.d, batch[c.s]})
		}
		st.link(ix.dim, slot, p, near)
		st.linking = slots[i+1:]
	}
	st.linking = nil
	return batch
}

// linkHold bounds how long upsert holds the write lock to link a
// document's chunks before it lets waiting searches in.
const linkHold = time.Millisecond

// reserve makes room for n more slots in the visible state's arrays (and
// its graph's) when they are full: pages for the slab and the graph's layer
// 0, larger copies of the other arrays (chunks, liveness, lexical ids). They are made holding writeMu only (no other writer changes
// the state; searches go on reading the old arrays) and swapped in under
// the write lock, so searches never wait for a copy. The caller holds
// writeMu.
func (ix *Index) reserve(n int) {
	st := ix.st
	collectBefore(growBytes(st.chunks, n) + growBytes(st.alive, n) + growBytes(st.lexID, n))
	pages := st.vecs.newPages(st.vecs.len() + n)
	chunks := growCap(st.chunks, n)
	alive := growCap(st.alive, n)
	lexID := growCap(st.lexID, n)
	var l0 layer0Pages
	if g := st.graph; g != nil {
		l0 = g.l0.newPages(len(st.alive) + n) // the graph grows to the slab's length (graph.grow)
	}
	if pages == nil && chunks == nil && alive == nil && lexID == nil && l0.counts == nil {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	st.vecs.addPages(pages)
	if st.graph != nil {
		st.graph.l0.addPages(l0)
	}
	if chunks != nil {
		st.chunks = chunks
	}
	if alive != nil {
		st.alive = alive
	}
	if lexID != nil {
		st.lexID = lexID
	}
}

// growCap returns a copy of s with room for add more elements (and half as
// many again), or nil when s has that room already.
func growCap[T any](s []T, add int) []T {
	if add <= 0 || len(s)+add <= cap(s) {
		return nil
	}
	out := make([]T, len(s), growTo(s, add))
	copy(out, s)
	return out
}

// growTo is the capacity growCap gives s.
func growTo[T any](s []T, add int) int { return max(len(s)+add, cap(s)+cap(s)/2, 256) }

// growBytes is the size of the array growCap(s, add) allocates, 0 for none.
func growBytes[T any](s []T, add int) int64 {
	if add <= 0 || len(s)+add <= cap(s) {
		return 0
	}
	var x T
	return int64(growTo(s, add)) * int64(unsafe.Sizeof(x))
}

// DeleteDocument removes docID and its chunks, reporting whether it was
// stored.
func (ix *Index) DeleteDocument(ctx context.Context, docID string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("deleting document %q: %w", docID, err)
	}
	if !ix.writable {
		return false, fmt.Errorf("deleting document %q: %w", docID, ErrReadOnly)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.log == nil {
		return false, fmt.Errorf("deleting document %q: the index was closed", docID)
	}
	if _, ok := ix.st.docs[docID]; !ok { // only writers change docs, and we are the writer
		return false, nil
	}
	rec := &logRecord{op: opDelete, docID: docID}
	if err := ix.log.append(encodeRecord(ix.dim, rec)); err != nil {
		return false, fmt.Errorf("deleting document %q: %w", docID, err)
	}
	ix.mu.Lock()
	ix.st.remove(docID)
	ix.version++
	ix.mu.Unlock()
	if ix.catching {
		ix.pending = append(ix.pending, rec)
	}
	ix.maybeCompact()
	return true, nil
}

// normaliseInto writes v/|v| into dst (zero stays zero) and reports false
// when v holds a NaN or an infinity.
func normaliseInto(dst, v []float32) bool {
	var sum float64
	for _, x := range v {
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
		sum += f * f
	}
	if sum == 0 {
		clear(dst)
		return true
	}
	inv := 1 / math.Sqrt(sum)
	for i, x := range v {
		dst[i] = float32(float64(x) * inv)
	}
	return true
}

// plan draws the level of each chunk of recs (from its document and
// position, so a rebuild makes the same graph), finds its neighbours in the
// graph and, among the nearWindow chunks of recs before it, the hnswM0
// nearest (plan.near), all chunks in parallel. The read lock is taken per
// chunk: a read lock held long would make searches wait behind a writer
// waiting for the write lock. It returns the plans, one per chunk in
// order, and the state it planned against (the plans hold its slot
// numbers), nil when that changed midway.
func (ix *Index) plan(recs []*logRecord) ([]plan, *state) {
	dim := ix.dim
	type item struct {
		docID string
		i     int
		vec   []float32
	}
	var items []item
	for _, rec := range recs {
		for i := range rec.chunks {
			items = append(items, item{rec.docID, i, rec.vecs[i*dim : (i+1)*dim]})
		}
	}
	plans := make([]plan, len(items))
	ix.mu.RLock()
	st := ix.st
	ix.mu.RUnlock()
	if st.graph == nil {
		return plans, st
	}
	var moved atomic.Bool
	parallel(len(items), func(j int) {
		it := items[j]
		near := make([]cand, 0, min(j, nearWindow))
		for b := max(0, j-nearWindow); b < j; b++ {
			near = append(near, cand{1 - simdDot(it.vec, items[b].vec), int32(b)})
		}
		sortCands(near)
		if moved.Load() {
			return
		}
		ix.mu.RLock()
		defer ix.mu.RUnlock()
		if ix.st != st {
			moved.Store(true)
			return
		}
		plans[j] = st.planInsert(dim, it.vec, levelFor(it.docID, it.i))
		plans[j].near = near[:min(len(near), hnswM0)]
	})
	if moved.Load() {
		return plans, nil
	}
	return plans, st
}

// nearWindow is how many of a batch's chunks before a chunk plan compares
// it with: a batch of an ingest is about 128 chunks, and a long document's
// chunks lie near their neighbours in it.
const nearWindow = 128

// planStep is how many chunks linkSome plans per hold of the read lock.
const planStep = 16

// parallel calls fn(0) … fn(n-1) across the cores, yielding the core
// after each call: the writes' planning keeps every core busy, and a
// search that became runnable meanwhile would otherwise wait for the
// scheduler to preempt a worker (10 ms at a time) — its p99 during a bulk
// upload rose 4–7× before the yield (docs/index.md).
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(i)
			runtime.Gosched()
		}
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
}

// levelFor draws the HNSW level of chunk i of docID from a hash of both:
// P(level ≥ l) = M^-l, as the paper's random draw, but reproducible.
func levelFor(docID string, i int) int {
	h := fnv.New64a()
	h.Write([]byte(docID))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(i))
	h.Write(b[:])
	u := (float64(h.Sum64()>>11) + 0.5) / (1 << 53)
	return int(math.Floor(-math.Log(u) / math.Log(hnswM)))
}
