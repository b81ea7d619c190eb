package retrieval

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"

	"ragtime"
	"ragtime/lexical"
	"ragtime/pipeline"
)

var _ pipeline.Searcher = (*Index)(nil)

// StoreName names the embedded store (the `store` attribute of the search
// stage).
const StoreName = "embedded"

// Errors callers branch on.
var (
	// ErrIncompatible means the index on disk was built with another
	// embedder or dimension than the one configured.
	ErrIncompatible = errors.New("index incompatible with the configured embedder")
	// ErrLocked means another process holds the index's writer lock.
	ErrLocked = errors.New("index locked by another writer")
	// ErrReadOnly means a write was attempted on an index opened without
	// IndexOptions.Writable.
	ErrReadOnly = errors.New("index opened read-only")
	// ErrDimension means a vector does not have the index's dimension.
	ErrDimension = errors.New("vector dimension mismatch")
	// ErrCorrupt means an index file could not be decoded.
	ErrCorrupt = errors.New("index file corrupt")
)

// IndexOptions configures OpenIndex.
type IndexOptions struct {
	// Dimension is the length of the vectors the configured embedder
	// produces; the index refuses a file holding another dimension.
	Dimension int
	// Embedder names the configured embedder (e.g. "hash"); the index
	// refuses a file built by another one, since vectors of different
	// embedders are not comparable.
	Embedder string
	// Writable takes the data dir's writer lock (held until Close) so that
	// ReplaceDocument, DeleteDocument, Save and Compact are allowed. Only
	// one process at a time may hold it; `ragtime serve --read-only` opens
	// read-only and picks up what a concurrent `ragtime ingest` writes
	// through Reload.
	Writable bool
	// Exact turns the HNSW graph off: every search scans every vector
	// (--store-exact). Slower, but exact, and cheaper to write.
	Exact bool
	// Ef is the HNSW search candidate list length (0: DefaultEf).
	Ef int
	// CompactAfter is the size of the log past which a writable index
	// compacts in the background: 0 means DefaultCompactAfter, negative
	// never (Compact still can). The larger of it and a quarter of the
	// snapshot applies, so a big index is not rewritten for small logs.
	CompactAfter int64
	// Logger receives what loading and compaction do (a replayed log, a
	// rebuilt graph, a dropped torn record). Nil discards it.
	Logger *slog.Logger
}

// DefaultCompactAfter is the log size (bytes) past which a writable index
// compacts in the background unless IndexOptions.CompactAfter says
// otherwise. Replaying a log this size on open takes about a second per
// 20 MB on two cores with the HNSW graph.
const DefaultCompactAfter = 32 << 20

// Document is one source document as the index stores it.
type Document struct {
	DocID string
	Title string
	// ContentHash identifies the content the chunks came from (ingest uses
	// the hex SHA-256 of the file) so unchanged files can be skipped.
	ContentHash string
	// Source says where the document came from (a file path, "api"); the
	// Qdrant store keeps it in each point's payload.
	Source string
	// Chunks are the document's pieces in order. The index sets each
	// chunk's Index to its position, ID to "<DocID>#<Index>", DocID to
	// DocID and, when empty, Title to Title.
	Chunks []pipeline.Chunk
	// Vectors holds one embedding per chunk. The index stores normalised
	// copies, so scores are cosine similarities.
	Vectors [][]float32
}

// Index is the embedded vector store: every chunk's vector lives in one flat
// []float32 slab searched through an HNSW graph or exhaustively, persisted
// under <data dir>/index/ as a snapshot, its graph and a log of the writes
// made since (see docs/index.md).
//
// Index implements pipeline.Searcher. It is safe for concurrent use: a
// search sees each document either entirely before or entirely after a
// ReplaceDocument, never half of it.
type Index struct {
	dir      string // <data dir>/index
	path     string // the snapshot file
	logPath  string
	nextPath string // a running compaction's log segment
	dim      int
	embedder string
	writable bool
	exact    bool
	ef       int
	logger   *slog.Logger
	// compactAfter is IndexOptions.CompactAfter resolved (negative: never).
	compactAfter int64

	// saveMu serialises Reload and Close and guards lock, closed and the
	// follower's view of the files below.
	saveMu sync.Mutex
	lock   *flock.Flock
	closed bool
	snap   fileID // the snapshot read or written last (zero: none)
	logID  fileID // the log being followed (zero: none)
	// logEnd is the offset just past the last record applied from the log
	// identified by logID; 0 when that log follows another snapshot (a
	// compaction is under way) and nothing of it was applied.
	logEnd     int64
	logBase    int64 // the followed log's header size
	generation atomic.Uint64
	snapBytes  int64 // the snapshot's size (writer: guarded by writeMu)

	// writeMu serialises the writer's changes: a log append and its
	// application in memory, a compaction, a follower's replay. Searches
	// never take it.
	writeMu sync.Mutex
	log     *indexLog // the writer's log; nil when read-only or closed
	// While a compaction runs (catching set), prevLog is the log its
	// snapshot folds in, which no longer takes writes, and pending the
	// records written since its freeze, for the state it reads back.
	prevLog  *indexLog
	pending  []*logRecord
	catching bool
	// hook, set by tests, is called at the steps of a compaction (step).
	hook func(step string) error
	// compactMu serialises compactions; writes never wait for it.
	compactMu sync.Mutex
	// compacting is set while a background compaction runs; bg waits for it.
	compacting atomic.Bool
	bg         sync.WaitGroup
	bgMu       sync.Mutex // guards closing, so no compaction starts once Close waits
	closing    bool

	// mu guards st and version. Searches hold it for reading; mutations and
	// the swap of a reloaded state hold it for writing, and only while
	// holding writeMu (so a compaction holding writeMu can read st under a
	// read lock without ever making searches wait).
	mu      sync.RWMutex
	st      *state
	version uint64
}

// state is the searchable content of an index. Slots are positions in the
// slab; a freed slot (its document replaced or deleted) is dead until reused.
type state struct {
	vecs   []float32 // slot i is vecs[i*dim : (i+1)*dim]
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
	if !ix.exact {
		st.graph = newGraph()
	}
	return st
}

const (
	indexDirName  = "index"
	indexFileName = "embedded.idx"
	lockFileName  = "lock"
)

// OpenIndex opens (or, when writable, creates) the embedded index under
// dataDir: it reads the snapshot and its graph, and replays the log. A
// writer first removes temporary files a crash left behind, then cuts an
// interrupted record off the log's end. A missing index is empty; a
// read-only index picks up what a writer saves through Reload.
func OpenIndex(dataDir string, opts IndexOptions) (*Index, error) {
	if opts.Dimension < 1 {
		return nil, fmt.Errorf("opening index in %s: dimension %d must be positive", dataDir, opts.Dimension)
	}
	if opts.Embedder == "" {
		return nil, fmt.Errorf("opening index in %s: no embedder name given", dataDir)
	}
	if opts.Ef < 0 {
		return nil, fmt.Errorf("opening index in %s: --index-ef %d must be positive", dataDir, opts.Ef)
	}
	dir := filepath.Join(dataDir, indexDirName)
	ix := &Index{
		dir:          dir,
		path:         filepath.Join(dir, indexFileName),
		logPath:      filepath.Join(dir, logFileName),
		nextPath:     filepath.Join(dir, nextLogFileName),
		dim:          opts.Dimension,
		embedder:     opts.Embedder,
		writable:     opts.Writable,
		exact:        opts.Exact,
		ef:           cmpOr(opts.Ef, DefaultEf),
		logger:       opts.Logger,
		compactAfter: cmp.Or(opts.CompactAfter, DefaultCompactAfter),
	}
	if ix.logger == nil {
		ix.logger = slog.New(slog.DiscardHandler)
	}
	ix.st = ix.newState()
	if opts.Writable {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating index directory: %w", err)
		}
		if err := ix.takeLock(); err != nil {
			return nil, err
		}
		if err := ix.removeTemp(); err != nil {
			ix.Close()
			return nil, err
		}
	}
	if err := ix.open(); err != nil {
		ix.Close()
		return nil, err
	}
	return ix, nil
}

func (ix *Index) takeLock() error {
	name := filepath.Join(ix.dir, lockFileName)
	l := flock.New(name, flock.SetPermissions(0o644))
	ok, err := l.TryLock()
	if err != nil {
		return fmt.Errorf("locking %s: %w", name, err)
	}
	if !ok {
		return fmt.Errorf("%w (%s is held by another process)", ErrLocked, name)
	}
	ix.lock = l
	return nil
}

// Close waits for a running background compaction, syncs and closes the
// log and releases the writer lock of a writable index; writes fail after
// it.
func (ix *Index) Close() error {
	ix.saveMu.Lock()
	if ix.closed {
		ix.saveMu.Unlock()
		return nil
	}
	ix.closed = true
	ix.saveMu.Unlock()
	ix.bgMu.Lock()
	ix.closing = true
	ix.bgMu.Unlock()
	ix.bg.Wait()
	ix.compactMu.Lock() // an explicit Compact finishes first
	ix.compactMu.Unlock()
	ix.writeMu.Lock()
	var err error
	if ix.log != nil {
		err = ix.log.close()
		ix.log = nil
	}
	ix.writeMu.Unlock()
	ix.saveMu.Lock()
	defer ix.saveMu.Unlock()
	if ix.lock != nil {
		if cerr := ix.lock.Close(); cerr != nil && err == nil { // closing the descriptor drops the flock
			err = fmt.Errorf("releasing index lock: %w", cerr)
		}
		ix.lock = nil
	}
	return err
}

// Path returns the snapshot file's path.
func (ix *Index) Path() string { return ix.path }

// Dimension returns the dimension of the stored vectors.
func (ix *Index) Dimension() int { return ix.dim }

// Len returns the number of stored chunks.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.st.live
}

// DocumentHash returns the content hash recorded for docID.
func (ix *Index) DocumentHash(docID string) (string, bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	d, ok := ix.st.docs[docID]
	if !ok {
		return "", false
	}
	return d.hash, true
}

// StoredHash is DocumentHash for the Ingester's Store interface.
func (ix *Index) StoredHash(_ context.Context, docID string) (string, bool, error) {
	h, ok := ix.DocumentHash(docID)
	return h, ok, nil
}

// Flush makes every write so far durable (see Save).
func (ix *Index) Flush(context.Context) error { return ix.Save() }

// Documents lists the stored documents ordered by doc id.
func (ix *Index) Documents() []ragtime.DocumentInfo {
	ix.mu.RLock()
	out := make([]ragtime.DocumentInfo, 0, len(ix.st.docs))
	for id, d := range ix.st.docs {
		out = append(out, ragtime.DocumentInfo{DocID: id, Title: d.title, ContentHash: d.hash, Chunks: len(d.slots)})
	}
	ix.mu.RUnlock()
	slices.SortFunc(out, func(a, b ragtime.DocumentInfo) int { return cmp.Compare(a.DocID, b.DocID) })
	return out
}

// ReplaceDocument stores doc, replacing every chunk previously stored under
// its DocID in one step. A document without chunks is recorded (with its
// hash) but never found by a search.
func (ix *Index) ReplaceDocument(ctx context.Context, doc Document) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("replacing document %q: %w", doc.DocID, err)
	}
	if !ix.writable {
		return fmt.Errorf("replacing document %q: %w", doc.DocID, ErrReadOnly)
	}
	if doc.DocID == "" {
		return fmt.Errorf("replacing document: empty doc id")
	}
	if len(doc.Chunks) != len(doc.Vectors) {
		return fmt.Errorf("replacing document %q: %d chunks but %d vectors", doc.DocID, len(doc.Chunks), len(doc.Vectors))
	}
	// Everything is prepared outside the lock, so searches wait only for
	// the slot bookkeeping and a copy.
	vecs := make([]float32, len(doc.Vectors)*ix.dim)
	for i, v := range doc.Vectors {
		if len(v) != ix.dim {
			return fmt.Errorf("replacing document %q: chunk %d has %d dimensions, index has %d: %w",
				doc.DocID, i, len(v), ix.dim, ErrDimension)
		}
		if !normaliseInto(vecs[i*ix.dim:(i+1)*ix.dim], v) {
			return fmt.Errorf("replacing document %q: chunk %d has a NaN or infinite component", doc.DocID, i)
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
		lex: analyseAll(chunks)}
	frame := encodeRecord(ix.dim, rec)

	// With a graph, the expensive part of inserting (finding each vector's
	// neighbours) runs under the read lock, before the writer lock, so
	// searches and other writers' planning go on meanwhile.
	var plans []plan
	var planned *state
	if !ix.exact {
		plans, planned = ix.plan(doc.DocID, vecs)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.log == nil {
		return fmt.Errorf("replacing document %q: the index was closed", doc.DocID)
	}
	if !ix.exact && planned != ix.st { // a compaction renumbered the slots since
		plans, _ = ix.plan(doc.DocID, vecs)
	}
	if err := ix.log.append(frame); err != nil {
		return fmt.Errorf("replacing document %q: %w", doc.DocID, err)
	}
	ix.reserve(len(chunks))
	ix.upsert(rec, plans)
	if ix.catching {
		ix.pending = append(ix.pending, rec)
	}
	ix.maybeCompact()
	return nil
}

// upsert stores rec in the visible state, linking its chunks into the
// graph with plans (made by ix.plan against the current state). The
// document becomes visible whole in one hold of the write lock; its chunks
// are then linked in holds of about linkHold each (linking one chunk can
// take milliseconds: each of its neighbours may prune its own list),
// searches scanning those not linked yet (st.linking), so a large document
// never holds searches up for long. The caller holds writeMu.
func (ix *Index) upsert(rec *logRecord, plans []plan) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	st := ix.st
	slots := st.put(ix.dim, rec)
	ix.version++
	if st.graph == nil {
		return
	}
	st.linking = slots
	held := time.Now()
	for i, slot := range slots {
		if i > 0 && time.Since(held) >= linkHold {
			ix.mu.Unlock()
			ix.mu.Lock()
			held = time.Now()
		}
		p := plans[i]
		if p.links == nil && st.graph.entry >= 0 && i == 0 {
			// Planned against an empty graph that has filled since.
			p = st.planInsert(ix.dim, rec.vecs[:ix.dim], p.level)
		}
		st.link(ix.dim, slot, p, slots[:i])
		st.linking = slots[i+1:]
	}
	st.linking = nil
}

// linkHold bounds how long upsert holds the write lock to link a
// document's chunks before it lets waiting searches in.
const linkHold = time.Millisecond

// reserve makes room for n more slots in the visible state's arrays (and
// its graph's) when they are full. The copy into larger arrays is made
// holding writeMu only (no other writer changes the state; searches go on
// reading the old arrays) and swapped in under the write lock, so searches
// never wait for a copy of the slab. The caller holds writeMu.
func (ix *Index) reserve(n int) {
	st, dim := ix.st, ix.dim
	vecs := growCap(st.vecs, n*dim)
	chunks := growCap(st.chunks, n)
	alive := growCap(st.alive, n)
	lexID := growCap(st.lexID, n)
	var links0 []int32
	var dists0 []float32
	var count0 []uint8
	if g := st.graph; g != nil {
		// The graph grows to the slab's length (graph.grow).
		add := len(st.alive) + n - len(g.count0)
		links0 = growCap(g.links0, add*hnswCap0)
		dists0 = growCap(g.dists0, add*hnswCap0)
		count0 = growCap(g.count0, add)
	}
	if vecs == nil && chunks == nil && alive == nil && lexID == nil && links0 == nil && dists0 == nil && count0 == nil {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if vecs != nil {
		st.vecs = vecs
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
	if links0 != nil {
		st.graph.links0 = links0
	}
	if dists0 != nil {
		st.graph.dists0 = dists0
	}
	if count0 != nil {
		st.graph.count0 = count0
	}
}

// growCap returns a copy of s with room for add more elements (and half as
// many again), or nil when s has that room already.
func growCap[T any](s []T, add int) []T {
	if add <= 0 || len(s)+add <= cap(s) {
		return nil
	}
	out := make([]T, len(s), max(len(s)+add, cap(s)+cap(s)/2, 256))
	copy(out, s)
	return out
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

// ChunkID returns the id of chunk i of docID: "<docID>#<i>".
func ChunkID(docID string, i int) string { return docID + "#" + strconv.Itoa(i) }

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
		copy(st.vecs[int(slot)*dim:(int(slot)+1)*dim], rec.vecs[i*dim:(i+1)*dim])
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
// on: its documents, liveness and graph are copied, its vectors and chunks
// shared, which writes leave alone while st.frozen is set (they append past
// the copy's end, or reuse slots freed before the freeze, which the copy
// does not list). The caller holds writeMu.
func (st *state) freeze() *state {
	n := len(st.alive)
	f := &state{
		vecs:   st.vecs[:len(st.vecs):len(st.vecs)],
		chunks: st.chunks[:n:n],
		alive:  slices.Clone(st.alive),
		docs:   maps.Clone(st.docs),
		live:   st.live,
	}
	if st.graph != nil {
		f.graph = st.graph.clone()
	}
	st.frozen = true
	return f
}

// catchUp applies the records written during a compaction to the state it
// read back, which no search sees yet; their chunks are linked into the
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
	s := int32(len(st.alive))
	st.vecs = append(st.vecs, make([]float32, dim)...)
	st.chunks = append(st.chunks, pipeline.Chunk{})
	st.alive = append(st.alive, false)
	st.lexID = append(st.lexID, 0)
	return s
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

// exactBelow is the slab size below which searches scan exactly even with
// a graph: a scan of a thousand vectors takes well under a millisecond, and
// is exact.
var exactBelow = 1024

// Exact reports whether searches scan every vector (no HNSW graph).
func (ix *Index) Exact() bool { return ix.exact }

// Ef returns the HNSW search candidate list length.
func (ix *Index) Ef() int { return ix.ef }

// plan draws each vector's level (from its document and position, so a
// rebuild makes the same graph) and finds its neighbours, in parallel for
// a document of several chunks, under the read lock, taken per planStep
// chunks: a read lock held long would make searches wait behind a writer
// waiting for the write lock. It returns the state it planned against (the
// plans hold its slot numbers), nil when that changed midway.
func (ix *Index) plan(docID string, vecs []float32) ([]plan, *state) {
	n := len(vecs) / ix.dim
	plans := make([]plan, n)
	ix.mu.RLock()
	st := ix.st
	ix.mu.RUnlock()
	if st.graph == nil {
		return plans, st
	}
	for lo := 0; lo < n; lo += planStep {
		hi := min(lo+planStep, n)
		ix.mu.RLock()
		if ix.st != st {
			ix.mu.RUnlock()
			return plans, nil
		}
		parallel(hi-lo, func(i int) {
			plans[lo+i] = st.planInsert(ix.dim, vecs[(lo+i)*ix.dim:(lo+i+1)*ix.dim], levelFor(docID, lo+i))
		})
		ix.mu.RUnlock()
	}
	return plans, st
}

// planStep is how many chunks plan and linkSome plan per hold of the read
// lock.
const planStep = 16

// parallel calls fn(0) … fn(n-1) across the cores.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
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

// parallelMin is the number of slots from which a search is split across
// cores; below it the goroutine hand-off costs more than it saves.
var parallelMin = 8192

// Search returns the k chunks most similar (cosine) to query, best first.
// A zero query vector matches nothing.
func (ix *Index) Search(ctx context.Context, query []float32, k int, filter pipeline.Filter) ([]pipeline.Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("searching the embedded index: %w", err)
	}
	if len(query) != ix.dim {
		return nil, fmt.Errorf("searching the embedded index: query has %d dimensions, index has %d: %w", len(query), ix.dim, ErrDimension)
	}
	if k <= 0 {
		return nil, nil
	}
	qp := getQueryVec(ix.dim)
	defer queryVecs.Put(qp)
	q := *qp
	if !normaliseInto(q, query) {
		return nil, fmt.Errorf("searching the embedded index: query has a NaN or infinite component")
	}
	var zero = true
	for _, x := range q {
		if x != 0 {
			zero = false
			break
		}
	}
	if zero {
		return nil, nil
	}

	ix.mu.RLock()
	defer ix.mu.RUnlock()
	st := ix.st
	k = min(k, st.live) // a huge k must not size a huge heap
	if k == 0 {
		return nil, nil
	}
	var top topK
	var err error
	switch {
	case len(filter.DocIDs) > 0 || len(filter.Metadata) > 0:
		top, err = st.searchFiltered(ctx, ix.dim, q, k, filter)
	case st.graph != nil && len(st.alive) >= exactBelow && (len(st.unlinked) > 0 || len(st.linking) > 0):
		// Chunks still being linked (loaded ones, a large document's):
		// the graph's best and theirs, scored exactly, merged.
		top = topK{k: k, items: make([]scored, 0, k)}
		for _, c := range st.annSearch(ix.dim, q, k, ix.ef) {
			top.offer(scored{slot: c.s, score: 1 - c.d})
		}
		for _, list := range [][]int32{st.unlinked, st.linking} {
			for _, s := range list {
				if st.alive[s] {
					top.offer(scored{slot: s, score: simdDot(q, st.vecs[int(s)*ix.dim:(int(s)+1)*ix.dim])})
				}
			}
		}
	case st.graph != nil && len(st.alive) >= exactBelow:
		found := st.annSearch(ix.dim, q, k, ix.ef)
		hits := make([]pipeline.Hit, len(found))
		for i, c := range found {
			// The chunk's Metadata is the index's own, shared (Searcher's
			// contract): it is never modified in place, only replaced
			// with the chunk.
			hits[i] = pipeline.Hit{Chunk: st.chunks[c.s], Score: float64(1 - c.d)}
		}
		return hits, nil
	default:
		top, err = st.searchAll(ctx, ix.dim, q, k)
	}
	if err != nil {
		return nil, err
	}
	items := top.sorted()
	hits := make([]pipeline.Hit, len(items))
	for i, it := range items {
		hits[i] = pipeline.Hit{Chunk: st.chunks[it.slot], Score: float64(it.score)} // Metadata shared, as above
	}
	return hits, nil
}

// queryVecs holds the normalised query vectors of finished searches: one
// per search, of the index's dimension, let go as the search returns.
var queryVecs sync.Pool

// getQueryVec returns a pooled vector of dim components (their values
// left over; normaliseInto writes every one).
func getQueryVec(dim int) *[]float32 {
	if p, _ := queryVecs.Get().(*[]float32); p != nil && cap(*p) >= dim {
		*p = (*p)[:dim]
		return p
	}
	v := make([]float32, dim)
	return &v
}

// ctxEvery is how many slots a scan covers between checks of ctx.
const ctxEvery = 8192

func (st *state) searchAll(ctx context.Context, dim int, q []float32, k int) (topK, error) {
	n := len(st.alive)
	parts := 1
	if p := runtime.GOMAXPROCS(0); n >= parallelMin && p > 1 {
		parts = min(p, n/(parallelMin/2))
	}
	if parts <= 1 {
		return st.scanRange(ctx, dim, q, k, 0, n)
	}
	tops := make([]topK, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := n*p/parts, n*(p+1)/parts
		wg.Go(func() { tops[p], errs[p] = st.scanRange(ctx, dim, q, k, lo, hi) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return topK{}, err
	}
	top := tops[0]
	for _, t := range tops[1:] {
		for _, it := range t.items {
			top.offer(it)
		}
	}
	return top, nil
}

// scanRange scores slots [lo, hi): the hot loop of every search.
func (st *state) scanRange(ctx context.Context, dim int, q []float32, k, lo, hi int) (topK, error) {
	top := topK{k: k, items: make([]scored, 0, k)}
	vecs, alive := st.vecs, st.alive
	for i := lo; i < hi; i++ {
		if (i-lo)%ctxEvery == ctxEvery-1 {
			if err := ctx.Err(); err != nil {
				return top, fmt.Errorf("searching the embedded index: %w", err)
			}
		}
		if !alive[i] {
			continue
		}
		s := simdDot(q, vecs[i*dim:(i+1)*dim])
		if len(top.items) < k || s > top.items[0].score {
			top.offer(scored{slot: int32(i), score: s})
		}
	}
	return top, nil
}

func (st *state) searchFiltered(ctx context.Context, dim int, q []float32, k int, f pipeline.Filter) (topK, error) {
	top := topK{k: k, items: make([]scored, 0, k)}
	consider := func(s int32) {
		c := &st.chunks[s]
		for key, want := range f.Metadata {
			if got, ok := c.Metadata[key]; !ok || got != want {
				return
			}
		}
		top.offer(scored{slot: s, score: simdDot(q, st.vecs[int(s)*dim:(int(s)+1)*dim])})
	}
	if len(f.DocIDs) > 0 {
		seen := make(map[string]bool, len(f.DocIDs))
		for _, id := range f.DocIDs {
			e, ok := st.docs[id]
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			for _, s := range e.slots {
				consider(s)
			}
		}
		return top, ctx.Err()
	}
	for i, ok := range st.alive {
		if i%ctxEvery == ctxEvery-1 {
			if err := ctx.Err(); err != nil {
				return top, fmt.Errorf("searching the embedded index: %w", err)
			}
		}
		if ok {
			consider(int32(i))
		}
	}
	return top, nil
}

type scored struct {
	slot  int32
	score float32
}

// better orders results: higher score first, then lower slot, so equal
// scores rank the same however a scan was split.
func better(a, b scored) bool {
	return a.score > b.score || (a.score == b.score && a.slot < b.slot)
}

// topK keeps the k best results seen in a min-heap whose root is the worst
// kept. It is written out (not container/heap) because it sits in the
// search's hot loop, where container/heap's interface calls would box every
// element.
type topK struct {
	k     int
	items []scored
}

func (t *topK) offer(x scored) {
	h := t.items
	if len(h) < t.k {
		h = append(h, x)
		for i := len(h) - 1; i > 0; { // sift up
			p := (i - 1) / 2
			if !better(h[p], h[i]) {
				break
			}
			h[p], h[i] = h[i], h[p]
			i = p
		}
		t.items = h
		return
	}
	if !better(x, h[0]) {
		return
	}
	h[0] = x
	for i := 0; ; { // sift down
		l, r, w := 2*i+1, 2*i+2, i
		if l < len(h) && better(h[w], h[l]) {
			w = l
		}
		if r < len(h) && better(h[w], h[r]) {
			w = r
		}
		if w == i {
			break
		}
		h[i], h[w] = h[w], h[i]
		i = w
	}
}

// sorted returns the kept results best first.
func (t *topK) sorted() []scored {
	out := slices.Clone(t.items)
	slices.SortFunc(out, func(a, b scored) int {
		switch {
		case better(a, b):
			return -1
		case better(b, a):
			return 1
		}
		return 0
	})
	return out
}
