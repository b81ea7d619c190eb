package retrieval

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gofrs/flock"

	"ragtime"
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
	// GraphFrom is the size of the live vectors (chunks × dimension × 4
	// bytes) from which the index builds its HNSW graph: below it every
	// search scans every vector, exactly, and writes link nothing; once a
	// write takes the index past it, the graph is built in the background
	// (searches scan the chunks not linked yet) and kept from then on. It
	// is Qdrant's indexing_threshold (20 MB there, and in serve's
	// --index-graph-mb, DefaultGraphFromMB): under it a scan costs about as
	// much as a graph search and building the graph costs most of an
	// ingest. 0: a graph from the first chunk. Ignored with Exact.
	GraphFrom int64
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
	// graphFrom is IndexOptions.GraphFrom (wantsGraph).
	graphFrom int64
	logger    *slog.Logger
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
	logEnd  int64
	logBase int64 // the followed log's header size
	// segID, segBase and segEnd are the same for a running compaction's
	// log segment, which a follower reads once the log is complete
	// (followSegment); segID is zero when none is being followed.
	segID           fileID
	segBase, segEnd int64
	generation      atomic.Uint64
	snapBytes       int64 // the snapshot's size (writer: guarded by writeMu)

	// writeMu serialises the writer's changes: a log append and its
	// application in memory, a compaction, a follower's replay. Searches
	// never take it.
	writeMu sync.Mutex
	log     *indexLog // the writer's log; nil when read-only or closed
	// While a compaction runs (catching set), prevLog is the log its
	// snapshot folds in, which no longer takes writes, and pending the
	// records written since its freeze, for its new state.
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
	if opts.GraphFrom < 0 {
		return nil, fmt.Errorf("opening index in %s: the graph threshold (--index-graph-mb) must not be negative, got %d bytes", dataDir, opts.GraphFrom)
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
		graphFrom:    opts.GraphFrom,
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

// ChunkID returns the id of chunk i of docID: "<docID>#<i>".
func ChunkID(docID string, i int) string { return docID + "#" + strconv.Itoa(i) }

// Exact reports whether searches scan every vector (no HNSW graph).
func (ix *Index) Exact() bool { return ix.exact }

// Ef returns the HNSW search candidate list length.
func (ix *Index) Ef() int { return ix.ef }
