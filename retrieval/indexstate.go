package retrieval

import (
	"maps"
	"slices"

	"ragtime/lexical"
	"ragtime/pipeline"
)

// The embedded index's state: the slab of vectors, chunks and liveness
// that searches read, and how documents are put into and removed from it.

// state is the searchable content of an index. Slots are positions in the
// slab; a freed slot (its document replaced or deleted) is dead until reused.
type state struct {
	vecs   slab // slot s is vecs.vec(s)
	chunks []pipeline.Chunk
	alive  []bool
	free   []int32
	docs   map[string]*docEntry
	live   int
	// graph is the HNSW graph over the slots; nil when searches are exact.
	// With a graph, freed slots are not reused (their vectors still route
	// searches); they go at the next compaction.
	graph *graph
	// unlinked lists, in slot order, loaded chunks not yet in the graph
	// (see linkSome): searches scan them exactly.
	unlinked []int32
	// linking lists the slots of the document being linked by its writer,
	// a few per hold of the write lock (upsert): visible, so searches scan
	// them exactly like unlinked ones.
	linking []int32
	// lex is the lexical leg's inverted index over the live slots, and
	// lexID each live slot's id in it (lexical.go).
	lex   *lexical.Index
	lexID []uint32
	// sum is the checksum of the snapshot the state was read from (0 for
	// none): the lexical index file names it (lexicalfile.go).
	sum uint32
	// frozen is set while a compaction writes a copy of this state made
	// by freeze, which shares its vectors and chunks: slots freed
	// meanwhile keep their chunk and are not reused. Guarded by writeMu.
	frozen bool
}

type docEntry struct {
	title string
	hash  string
	slots []int32 // in chunk order
}

func newState() *state {
	return &state{docs: make(map[string]*docEntry), lex: lexical.NewIndex()}
}

func (ix *Index) newState() *state {
	st := newState()
	st.vecs = makeSlab(ix.dim, 0, 0)
	if ix.wantsGraph(st) {
		st.graph = newGraph()
	}
	return st
}

// wantsGraph reports whether st should have an HNSW graph: the index is
// not exact and st's live vectors reach IndexOptions.GraphFrom.
func (ix *Index) wantsGraph(st *state) bool {
	return !ix.exact && int64(st.live)*int64(ix.dim)*4 >= ix.graphFrom
}

// startGraph gives the visible state its HNSW graph once a write has taken
// its vectors past IndexOptions.GraphFrom: every live chunk is listed as
// unlinked (searches go on scanning them exactly) and linked in the
// background, a wave at a time. It waits for no compaction: while one runs
// (its freeze would have to link the whole graph holding writeMu, and the
// state it swaps in is read from a snapshot without a graph) it leaves the
// start to that compaction's end (compact calls beginGraph). The caller
// holds writeMu.
func (ix *Index) startGraph() {
	if !ix.compactMu.TryLock() {
		return
	}
	defer ix.compactMu.Unlock()
	ix.beginGraph()
}

// logGraphStart says that st's vectors passed the graph threshold and its
// graph is being built.
func (ix *Index) logGraphStart(st *state) {
	ix.logger.Info("building the index's HNSW graph in the background: its vectors passed the graph threshold (searches scan the chunks not linked yet)",
		"dir", ix.dir, "chunks", st.live, "vector_bytes", int64(st.live)*int64(ix.dim)*4, "threshold_bytes", ix.graphFrom)
}

// beginGraph is startGraph for a caller that holds both writeMu and
// compactMu.
func (ix *Index) beginGraph() {
	st := ix.st
	if st.graph != nil || !ix.wantsGraph(st) {
		return
	}
	g := newGraph()
	g.grow(len(st.alive))
	ix.mu.Lock()
	st.graph = g
	st.unlinked = liveFrom(st, 0)
	ix.mu.Unlock()
	ix.logGraphStart(st)
	ix.linkInBackground(st, nil)
}

// remove frees the slots of docID; the caller holds the write lock.
func (st *state) remove(docID string) bool {
	e, ok := st.docs[docID]
	if !ok {
		return false
	}
	for _, s := range e.slots {
		st.alive[s] = false
		st.lex.Delete(st.lexID[s])
		if st.frozen { // a compaction reads the slot's chunk and vector
			continue
		}
		st.chunks[s] = pipeline.Chunk{} // release the text
		if st.graph == nil {
			st.free = append(st.free, s)
		}
	}
	st.live -= len(e.slots)
	delete(st.docs, docID)
	return true
}

// put stores rec's document in st (replacing the one of its id) and
// returns its slots in chunk order; it does not touch the graph. The caller
// holds the write lock, or st is not visible yet.
func (st *state) put(dim int, rec *logRecord) []int32 {
	st.remove(rec.docID)
	e := &docEntry{title: rec.title, hash: rec.hash, slots: make([]int32, len(rec.chunks))}
	for i := range rec.chunks {
		slot := st.alloc(dim)
		copy(st.vecs.vec(slot), rec.vecs[i*dim:(i+1)*dim])
		st.chunks[slot] = rec.chunks[i]
		st.alive[slot] = true
		var d lexical.Doc
		if rec.lex != nil {
			d = rec.lex[i]
		} else {
			d = analyseChunk(&rec.chunks[i])
		}
		st.lexID[slot] = st.lex.Add(d, slot)
		e.slots[i] = slot
	}
	st.live += len(rec.chunks)
	st.docs[rec.docID] = e
	return e.slots
}

// freeze returns a copy of st for a compaction to write while writes go
// on: its documents, liveness, lexical ids and the graph's upper layers
// are copied (its
// layer 0 by Index.copyFrozenLayer0, after the hold), its vectors and chunks
// shared, which writes leave alone while st.frozen is set (they append past
// the copy's end, or reuse slots freed before the freeze, which the copy
// does not list). The caller holds writeMu.
func (st *state) freeze() *state {
	n := len(st.alive)
	f := &state{
		vecs:   st.vecs.frozen(),
		chunks: st.chunks[:n:n],
		alive:  slices.Clone(st.alive),
		lexID:  slices.Clone(st.lexID[:n]),
		docs:   maps.Clone(st.docs),
		live:   st.live,
	}
	if st.graph != nil {
		f.graph = st.graph.cloneUpper() // layer 0: Index.copyFrozenLayer0
	}
	st.frozen = true
	return f
}

// reclaimed returns the state st's snapshot opens as (readFileAt, with room
// for extra more chunks): the live chunks only, renumbered in the
// snapshot's order (documents by id, then chunk order), each chunk as the
// file gives it back, and no lexical index or graph yet. It shares st's
// strings and metadata maps, which no write changes, and copies the
// vectors. The caller keeps st from changing (a frozen copy).
func (st *state) reclaimed(dim, extra int) *state {
	n := 0
	for _, e := range st.docs {
		n += len(e.slots)
	}
	nst := newState()
	nst.chunks = make([]pipeline.Chunk, n, n+extra)
	nst.vecs = makeSlab(dim, n, extra)
	nst.alive = make([]bool, n, n+extra)
	slot := 0
	for _, id := range slices.Sorted(maps.Keys(st.docs)) {
		e := st.docs[id]
		ne := &docEntry{title: e.title, hash: e.hash, slots: make([]int32, len(e.slots))}
		for i, s := range e.slots {
			c := &st.chunks[s]
			nc := pipeline.Chunk{ID: ChunkID(id, i), DocID: id, Title: e.title, Index: i, Text: c.Text}
			if len(c.Metadata) > 0 {
				nc.Metadata = c.Metadata
			}
			nst.chunks[slot] = nc
			copy(nst.vecs.vec(int32(slot)), st.vecs.vec(s))
			nst.alive[slot] = true
			ne.slots[i] = int32(slot)
			slot++
		}
		nst.docs[id] = ne
	}
	nst.live = n
	return nst
}

// catchUp applies the records written during a compaction to the new
// state, which no search sees yet; their chunks are linked into the
// graph in the background (searches scan them exactly meanwhile).
func (st *state) catchUp(dim int, recs []*logRecord) {
	for _, rec := range recs {
		if rec.op == opDelete {
			st.remove(rec.docID)
			continue
		}
		slots := st.put(dim, rec)
		if st.graph != nil {
			st.unlinked = append(st.unlinked, slots...)
		}
	}
}

// apply replays one log record into st, which is not visible yet.
func (st *state) apply(dim int, rec *logRecord) {
	if rec.op == opDelete {
		st.remove(rec.docID)
		return
	}
	st.put(dim, rec)
}

// alloc returns a dead slot, growing the slab when none is free.
func (st *state) alloc(dim int) int32 {
	if n := len(st.free); n > 0 {
		s := st.free[n-1]
		st.free = st.free[:n-1]
		return s
	}
	s := st.vecs.push()
	st.chunks = append(st.chunks, pipeline.Chunk{})
	st.alive = append(st.alive, false)
	st.lexID = append(st.lexID, 0)
	return s
}
