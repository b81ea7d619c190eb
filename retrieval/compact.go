package retrieval

// The compaction (the top of indexstore.go and docs/index.md, Compaction):
// its phases, the background trigger and what a compaction reports.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"ragtime/lexical"
)

// CompactStats describes one compaction.
type CompactStats struct {
	// Generation is the new snapshot's.
	Generation uint64
	// Documents and Chunks are what the snapshot holds.
	Documents, Chunks int
	// Reclaimed is how many chunk slots of replaced or deleted documents
	// were dropped (from memory and disk).
	Reclaimed int
	// LogBytes is the size of the log folded into the snapshot.
	LogBytes int64
	// BytesBefore and BytesAfter are the index's size on disk.
	BytesBefore, BytesAfter int64
	Took                    time.Duration
	// Freeze and Swap are how long the compaction held the writer mutex
	// (writes wait for it) to switch the writes to its log segment, and to
	// apply the last writes and swap the new state in.
	Freeze, Swap time.Duration
	// CopyHold is the longest of the holds in which the frozen copy's
	// graph layer 0 was copied (writes wait for it too).
	CopyHold time.Duration
}

// Compact writes the index as a new snapshot and graph and starts an empty
// log, dropping the chunks of replaced and deleted documents on disk and in
// memory. Searches and writes go on meanwhile: writes wait only for two
// short holds of the writer lock (see the top of indexstore.go). A writable
// index also compacts on its own, in the background, once the log passes
// IndexOptions.CompactAfter.
func (ix *Index) Compact(ctx context.Context) (CompactStats, error) {
	if !ix.writable {
		return CompactStats{}, fmt.Errorf("compacting index: %w", ErrReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return CompactStats{}, fmt.Errorf("compacting index: %w", err)
	}
	ix.compactMu.Lock()
	defer ix.compactMu.Unlock()
	if ix.isClosed() {
		return CompactStats{}, fmt.Errorf("compacting index: the index was closed")
	}
	return ix.compact()
}

// isClosed reports whether Close has closed the log.
func (ix *Index) isClosed() bool {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	return ix.log == nil
}

// IngestCompactAfter is the log size (bytes) past which `ragtime ingest`
// compacts when it has finished: about 1,300 chunks of 512 dimensions, so
// the next open loads their graph rather than linking them again.
const IngestCompactAfter = 4 << 20

// CompactIfLogOver compacts (see Compact) when the log holds more than n
// bytes of records, and reports whether it did.
func (ix *Index) CompactIfLogOver(ctx context.Context, n int64) (CompactStats, bool, error) {
	if !ix.writable {
		return CompactStats{}, false, fmt.Errorf("compacting index: %w", ErrReadOnly)
	}
	ix.compactMu.Lock()
	defer ix.compactMu.Unlock()
	ix.writeMu.Lock()
	if ix.log == nil {
		ix.writeMu.Unlock()
		return CompactStats{}, false, fmt.Errorf("compacting index: the index was closed")
	}
	size := ix.log.size - ix.log.base
	ix.writeMu.Unlock()
	if size <= n {
		return CompactStats{}, false, nil
	}
	if err := ctx.Err(); err != nil {
		return CompactStats{}, false, fmt.Errorf("compacting index: %w", err)
	}
	st, err := ix.compact()
	return st, err == nil, err
}

// catchUpRoom is how many chunks written during a compaction its new state
// has room for before its arrays grow.
const catchUpRoom = 4096

// catchUpLocked is the number of records written during a compaction that
// it applies to the new state under the writer lock, at its end; while
// more are waiting it applies them without the lock and looks again.
const catchUpLocked = 64

// compaction is one compaction's state as it goes through the phases of
// docs/index.md (Compaction), from generation gen-1 to gen.
type compaction struct {
	gen   uint64
	stats CompactStats
	// seg is the new log segment (startSegment); old the log it replaces
	// and live the state frozen (freeze), given back by unfreeze if the
	// compaction fails before its commit point.
	seg, old *indexLog
	live     *state
	// frozen is live's frozen copy, dropped once its files are written;
	// lex is the view of live's lexical index taken with it.
	frozen *state
	lex    lexical.View
	// idxTmp, graphTmp and lexTmp are the new files before their renames
	// (graphTmp is empty with no graph); nst is the new state, as the new
	// snapshot opens, id its snapshot file's identity (writeFiles).
	idxTmp, graphTmp, lexTmp string
	nst                      *state
	id                       fileID
}

// compact is Compact; the caller holds compactMu (not writeMu). Its phases
// are the steps of docs/index.md (Compaction).
func (ix *Index) compact() (CompactStats, error) {
	start := time.Now()
	gen := ix.generation.Load() + 1 // only compactions change it, one at a time
	c := &compaction{gen: gen, stats: CompactStats{Generation: gen}}
	c.stats.BytesBefore, _ = ix.DiskSize()
	wrap := func(err error) error { return fmt.Errorf("compacting the index in %s: %w", ix.dir, err) }

	ix.linkLoaded()
	if err := ix.startSegment(c); err != nil {
		return c.stats, wrap(err)
	}
	if err := ix.freeze(c); err != nil {
		return c.stats, wrap(err)
	}
	ix.copyFrozenLayer0(c)
	err := ix.writeFiles(c)
	if err == nil {
		err = ix.commit(c)
	}
	if err != nil {
		return c.stats, wrap(ix.abandon(c, err))
	}
	// The snapshot's rename must be durable before the segment's: the other
	// way round, a crash could leave the old snapshot without the old log.
	derr := syncDir(ix.dir)
	ix.step("committed")

	linkLater := ix.catchUpAndSwap(c)
	derr = ix.renameSegment(c, derr)
	ix.writeMu.Lock()
	if derr == nil && ix.log != nil {
		ix.beginGraph() // a write during the compaction took the index past the graph threshold
	}
	ix.writeMu.Unlock()
	c.old.closeFile(derr == nil) // its records are all in the snapshot, once committed
	if derr != nil {
		return c.stats, wrap(derr)
	}
	if linkLater {
		ix.linkInBackground(c.nst, nil)
	}
	c.stats.BytesAfter, _ = ix.DiskSize()
	c.stats.Took = time.Since(start)
	return c.stats, nil
}

// linkLoaded links the chunks loaded but not linked yet, a wave per hold
// of the locks, since the graph file must hold every chunk. It changes
// nothing on disk: a crash during it leaves the index as it was.
func (ix *Index) linkLoaded() {
	for {
		ix.mu.RLock()
		st := ix.st
		ix.mu.RUnlock()
		if !ix.linkSome(st, false) {
			break
		}
	}
}

// startSegment is step 1 of docs/index.md (Segment): it creates the new
// log segment, durable (written as a temporary file, fsynced, renamed, the
// directory fsynced) before any writer waits for it, and opens it in
// c.seg. A crash after it leaves snapshot G, log G and an empty segment
// G+1, which the next open appends to the log and removes; on failure it
// removes the segment.
func (ix *Index) startSegment(c *compaction) error {
	h := logHeader(ix.dim, c.gen, ix.embedder)
	segTmp, err := writeTemp(ix.dir, nextLogFileName, func(f *os.File) error {
		_, err := f.Write(h)
		return err
	})
	if err == nil {
		if err = os.Rename(segTmp, ix.nextPath); err != nil {
			os.Remove(segTmp)
		}
	}
	if err == nil {
		if err = syncDir(ix.dir); err != nil {
			os.Remove(ix.nextPath)
		}
	}
	if err == nil {
		if c.seg, err = openLogForAppend(ix.nextPath, int64(len(h)), int64(len(h))); err != nil {
			os.Remove(ix.nextPath)
		}
	}
	if err != nil {
		return fmt.Errorf("starting log segment %s: %w", ix.nextPath, err)
	}
	return nil
}

// freeze is step 2 of docs/index.md (Freeze), in one short hold of the
// writer lock: the old log is synced (the commit must not become durable
// before the writes it folds in), writes go to the segment from now on
// (and are kept in ix.pending for catchUpAndSwap), and the state is
// frozen for the files to be written from (c.frozen), with a view of its
// lexical index's postings (c.lex). The bulk of that
// fsync happens before the lock (an ingest saves every 100 documents):
// the one under it flushes what came since. A crash after it leaves
// snapshot G, log G and segment G+1 holding the writes since, which the
// next open replays and appends to the log; on failure (the index was
// closed, the fsync failed) it closes and removes the segment and writes
// go on to the log.
func (ix *Index) freeze(c *compaction) error {
	ix.writeMu.Lock()
	cur := ix.log
	ix.writeMu.Unlock()
	if cur != nil && cur.f != nil {
		cur.syncUpTo(cur.written.Load()) // its descriptor stays open: Close waits for compactMu
	}
	ix.writeMu.Lock()
	held := time.Now()
	if ix.log == nil {
		ix.writeMu.Unlock()
		c.seg.closeFile(false)
		os.Remove(ix.nextPath)
		return errors.New("the index was closed")
	}
	for ix.linkSome(ix.st, true) { // what a write may have loaded since: normally nothing
	}
	if err := ix.log.sync(); err != nil {
		ix.writeMu.Unlock()
		c.seg.closeFile(false)
		os.Remove(ix.nextPath)
		return err
	}
	c.old, c.live = ix.log, ix.st
	c.stats.LogBytes = c.old.size - c.old.base
	ix.prevLog, ix.log = c.old, c.seg
	c.frozen = c.live.freeze()
	// One slice header per term, holding writeMu: writers change the
	// lexical index holding it (and ix.mu), searches go on.
	c.lex = c.live.lex.View(c.live.lex.Docs())
	ix.pending, ix.catching = nil, true
	c.stats.Freeze = time.Since(held)
	ix.writeMu.Unlock()
	ix.step("frozen")
	frozen := c.frozen
	c.stats.Documents, c.stats.Chunks, c.stats.Reclaimed = len(frozen.docs), frozen.live, len(frozen.alive)-frozen.live
	return nil
}

// copyFrozenLayer0 ends step 2 of docs/index.md (Freeze): it copies the
// live graph's layer 0 into the frozen copy, layerCopyStep slots per hold
// of writeMu, which is what keeps the graph still (every link is made
// holding it), so that no writer waits for a copy of the whole graph (tens
// of megabytes at a few hundred thousand chunks). Links a writer makes to a
// frozen slot between two holds are copied with the later pieces: those to
// slots the frozen state does not hold as live are left out of the file by
// liveLinks, like links to deleted chunks, and those between frozen chunks
// are as good as the ones they replaced.
func (ix *Index) copyFrozenLayer0(c *compaction) {
	f := c.frozen.graph
	if f == nil {
		return
	}
	n := len(c.frozen.alive)
	f.grow(n)
	for lo := 0; lo < n; lo += layerCopyStep {
		hi := min(lo+layerCopyStep, n)
		ix.writeMu.Lock()
		held := time.Now()
		f.copyLayer0(c.live.graph, lo, hi)
		c.stats.CopyHold = max(c.stats.CopyHold, time.Since(held))
		ix.writeMu.Unlock()
	}
}

// layerCopyStep is how many slots' layer-0 lists copyFrozenLayer0 copies
// per hold of writeMu: 16,384 slots are 6 MiB, a millisecond or two.
const layerCopyStep = 16384

// writeFiles is step 3 of docs/index.md (Files), with no lock held: the
// snapshot and the graph of the frozen state are written as temporary
// files; the new state (c.nst: the live chunks only, renumbered in the
// snapshot's order, as the snapshot opens) is built from the frozen one
// while the snapshot is written, and its graph read back from the graph
// file; and the lexical index of the new state (the snapshot's, nothing
// caught up yet) is written as a temporary file too. A crash during it
// leaves `*.tmp` files beside snapshot G, log G and segment G+1, which the
// next open removes; on failure the caller abandons the compaction.
func (ix *Index) writeFiles(c *compaction) error {
	gen, frozen := c.gen, c.frozen
	// The new state's lexical index and the new state are made beside the
	// snapshot's write rather than after it. The lexical index is the live
	// one's postings as they stood at the freeze, renumbered in the
	// snapshot's order without the dead chunks: the chunks' text is not
	// analysed again (it was most of a compaction's CPU).
	order := frozen.fileOrder()
	lexDone := make(chan *lexical.Index, 1)
	view, lexID := c.lex, frozen.lexID
	go func() {
		newID := make([]int32, view.Ids())
		for i := range newID {
			newID[i] = -1
		}
		for s, slot := range order {
			newID[lexID[slot]] = int32(s)
		}
		lexDone <- view.Renumbered(newID, len(order))
	}()
	c.lex = lexical.View{}
	stDone := make(chan *state, 1)
	go func() { stDone <- frozen.reclaimed(ix.dim, catchUpRoom) }()
	// Both read the frozen state: they are over before writeFiles
	// returns, whatever happens (an abandoned compaction lets writes reuse
	// its slots).
	var lex *lexical.Index
	var nst *state
	waited := false
	wait := func() {
		if !waited {
			lex, nst, waited = <-lexDone, <-stDone, true
		}
	}
	defer wait()
	var sum uint32
	var err error
	c.idxTmp, err = writeTemp(ix.dir, indexFileName, func(f *os.File) error {
		var werr error
		sum, werr = ix.writeState(&chunkSyncer{f: f}, frozen, gen)
		return werr
	})
	if err == nil && frozen.graph != nil {
		c.graphTmp, err = writeTemp(ix.dir, graphFileName, func(f *os.File) error {
			return writeGraph(&chunkSyncer{f: f}, frozen, ix.dim, order, gen)
		})
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = os.Stat(c.idxTmp)
	}
	wait()
	c.frozen, frozen = nil, nil
	if err == nil && lex.Docs() != len(nst.chunks) {
		err = fmt.Errorf("the lexical index holds %d chunks, the new snapshot %d", lex.Docs(), len(nst.chunks))
	}
	if err == nil {
		c.nst, c.id = nst, fileIDOf(fi)
		nst.sum = sum
		nst.useLexical(lex)
		if c.graphTmp != "" {
			if nst.graph, err = readGraph(c.graphTmp, len(nst.chunks), gen); err != nil {
				err = fmt.Errorf("reading back the new graph: %w", err)
			}
		}
		if err == nil && nst.graph != nil {
			nst.graph.reserve(len(nst.chunks) + catchUpRoom)
		}
	}
	if err == nil {
		// The lexical index of the new state: the snapshot's, nothing
		// caught up yet.
		c.lexTmp, err = writeLexicalTemp(ix.dir, c.nst, gen)
	}
	return err
}

// commit is step 4 of docs/index.md (Commit) but for its directory fsync:
// the graph and the lexical index are renamed into place first, then the
// snapshot, the commit point. A crash before that rename leaves snapshot
// G, log G and segment G+1, perhaps beside a graph and a lexical index of
// G+1 that the old snapshot does not match, which the next open rebuilds;
// a crash after it leaves snapshot G+1, log G and segment G+1, which the
// next open finishes. On failure (before the commit point) the caller
// abandons the compaction.
func (ix *Index) commit(c *compaction) error {
	err := ix.step("commit")
	if err == nil {
		graphPath := filepath.Join(ix.dir, graphFileName)
		if c.graphTmp != "" {
			err = os.Rename(c.graphTmp, graphPath)
		} else if err = os.Remove(graphPath); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err == nil {
		err = os.Rename(c.lexTmp, filepath.Join(ix.dir, lexFileName))
	}
	if err == nil {
		err = ix.step("lexical renamed")
	}
	if err == nil {
		err = os.Rename(c.idxTmp, ix.path) // the commit point
	}
	return err
}

// abandon undoes a compaction that failed (err) before its commit point:
// it removes the temporary files and gives the segment's records back to
// the log (unfreeze), leaving snapshot G and log G as before it started.
func (ix *Index) abandon(c *compaction, err error) error {
	for _, t := range []string{c.idxTmp, c.graphTmp, c.lexTmp} {
		if t != "" {
			os.Remove(t)
		}
	}
	return errors.Join(err, ix.unfreeze(c.live))
}

// catchUpAndSwap is the first half of step 5 of docs/index.md (Catch up
// and swap), after the commit point: the writes made since the freeze
// are applied to the new state, the bulk without the lock, the last few
// (at most catchUpLocked) holding the writer lock, in the same hold as the
// new state replaces the old one. It changes nothing on disk: a crash
// during it leaves snapshot G+1, log G and segment G+1, which the next
// open finishes. It reports whether chunks are left to link in the
// background.
func (ix *Index) catchUpAndSwap(c *compaction) bool {
	nst := c.nst
	var recs []*logRecord
	var held time.Time
	for {
		ix.writeMu.Lock()
		held = time.Now()
		recs, ix.pending = ix.pending, nil
		if len(recs) <= catchUpLocked && nst.hasRoom(ix.dim, recs) {
			break
		}
		ix.writeMu.Unlock()
		nst.catchUp(ix.dim, recs)
	}
	nst.catchUp(ix.dim, recs)
	linkLater := len(nst.unlinked) > 0
	ix.catching = false
	ix.prevLog = nil
	ix.mu.Lock()
	ix.st = nst
	ix.version++
	ix.mu.Unlock()
	ix.generation.Store(c.gen)
	ix.snap, ix.snapBytes = c.id, c.id.size
	c.stats.Swap = time.Since(held)
	ix.writeMu.Unlock()
	return linkLater
}

// renameSegment is the end of step 5 of docs/index.md: the segment is
// renamed over the log and the directory fsynced, while writes go on
// appending to it through its descriptor; derr is the error of the
// directory fsync after the commit, if any, which forbids the rename. A
// crash before the rename leaves snapshot G+1, log G and segment G+1 (the
// next open finishes), after it snapshot G+1 and log G+1. On failure
// writes are refused until an open finishes the compaction; it returns
// that failure.
func (ix *Index) renameSegment(c *compaction, derr error) error {
	if derr == nil {
		derr = os.Rename(ix.nextPath, ix.logPath)
	}
	if derr == nil {
		derr = syncDir(ix.dir)
	}
	ix.writeMu.Lock()
	if derr != nil {
		// Appending to the segment would be lost if it never became the
		// log: refuse writes until an open finishes the compaction.
		if ix.log != nil {
			ix.log.broken = fmt.Errorf("the compaction to generation %d could not rename %s over the log: %w", c.gen, ix.nextPath, derr)
		}
	} else if ix.log != nil {
		ix.log.path = ix.logPath
	}
	ix.writeMu.Unlock()
	return derr
}

// hasRoom reports whether st's slab and graph arrays have room for the
// chunks of recs without growing (a copy of the whole slab).
func (st *state) hasRoom(dim int, recs []*logRecord) bool {
	n := len(st.alive)
	for _, r := range recs {
		n += len(r.chunks)
	}
	ok := n <= cap(st.alive) && n <= cap(st.chunks) && n <= cap(st.lexID) && n <= st.vecs.capacity()
	if g := st.graph; ok && g != nil {
		ok = n <= g.l0.capacity()
	}
	return ok
}

// unfreeze undoes a compaction that failed before its commit point: the
// records written to the segment meanwhile are appended to the log, which
// takes the writes again. If that fails too, writes are refused (the
// segment must not be overwritten by the next compaction), and the next
// open does it.
func (ix *Index) unfreeze(live *state) error {
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.catching, ix.pending = false, nil
	live.frozen = false
	seg, old := ix.log, ix.prevLog
	ix.prevLog = nil
	if seg == nil {
		old.closeFile(false)
		return nil
	}
	if err := old.fold(ix.nextPath, seg.base, seg.size); err != nil {
		seg.broken = fmt.Errorf("a failed compaction could not return its log segment to the log: %w", err)
		old.closeFile(false)
		return err
	}
	ix.log = old
	seg.closeFile(true) // its records are in old, synced by fold
	if err := os.Remove(ix.nextPath); err != nil {
		return fmt.Errorf("removing index log segment: %w", err)
	}
	return syncDir(ix.dir)
}

// step calls the test hook, if any, at a named step of a compaction.
func (ix *Index) step(name string) error {
	if ix.hook == nil {
		return nil
	}
	return ix.hook(name)
}

// chunkSyncer writes to f and fsyncs it every syncChunk bytes, so a
// compaction's files reach the disk as they are written and the fsync
// before the commit has little left to flush.
type chunkSyncer struct {
	f *os.File
	n int64
}

const syncChunk = 8 << 20

func (w *chunkSyncer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.n += int64(n)
	if err == nil && w.n >= syncChunk {
		w.n = 0
		err = w.f.Sync()
	}
	return n, err
}

// maybeCompact starts a background compaction when the log has outgrown
// its threshold. The caller holds writeMu.
func (ix *Index) maybeCompact() {
	if ix.compactAfter < 0 || ix.catching {
		return
	}
	if ix.log.size-ix.log.base >= max(ix.compactAfter, ix.snapBytes/4) {
		ix.startCompaction()
	}
}

// startCompaction compacts in a goroutine unless one runs already or the
// index is closing; Close waits for it.
func (ix *Index) startCompaction() {
	if !ix.compacting.CompareAndSwap(false, true) {
		return
	}
	ix.bgMu.Lock()
	if ix.closing {
		ix.bgMu.Unlock()
		ix.compacting.Store(false)
		return
	}
	ix.bg.Add(1)
	ix.bgMu.Unlock()
	go func() {
		defer ix.bg.Done()
		defer ix.compacting.Store(false)
		ix.compactMu.Lock()
		defer ix.compactMu.Unlock()
		if ix.isClosing() || ix.isClosed() {
			return
		}
		st, err := ix.compact()
		if err != nil {
			ix.logger.Error("compacting the index in the background", "err", err)
			return
		}
		ix.logger.Info("compacted the index", "dir", ix.dir, "generation", st.Generation, "documents", st.Documents,
			"chunks", st.Chunks, "reclaimed_chunks", st.Reclaimed, "log_bytes", st.LogBytes,
			"bytes_before", st.BytesBefore, "bytes_after", st.BytesAfter, "took", st.Took.Round(time.Millisecond),
			"writes_held_freeze", st.Freeze.Round(time.Millisecond), "writes_held_copy", st.CopyHold.Round(time.Millisecond),
			"writes_held_swap", st.Swap.Round(time.Millisecond))
	}()
}

func (ix *Index) isClosing() bool {
	ix.bgMu.Lock()
	defer ix.bgMu.Unlock()
	return ix.closing
}
