package retrieval

// How the index's files work together (docs/index.md has the whole
// story): embedded.idx is a snapshot of generation G, embedded.hnsw its
// HNSW graph (also G), embedded.lex its lexical index (G, and the
// snapshot's checksum: lexicalfile.go), embedded.log the writes made since
// (its header says it follows G). Opening reads the snapshot, the graph and
// the lexical index and replays the log; a write appends one record to the
// log; Save fsyncs the log.
//
// A compaction to G+1 never makes writers wait for it. It first starts a
// new log segment, embedded.next.log (header: follows G+1), and switches
// the writes to it in one short hold of the writer lock, taking a frozen
// copy of the state's bookkeeping (the vectors and chunk texts are shared:
// they are not overwritten meanwhile). It then writes the snapshot and the
// graph of that frozen state as temporary files, reads them back (the
// reclaimed state), writes the lexical index of the state read back, and
// commits: the graph, the lexical index, then the snapshot (the commit
// point), a directory fsync, then the segment renamed over the log. The
// writes made meanwhile are applied to the new state, and it replaces the
// old one in one more short hold. A crash leaves one of:
//   - snapshot G, log G, segment G+1 (before the commit point): the open
//     replays both logs and appends the segment's records to the log;
//   - snapshot G+1, log G, segment G+1 (after it): the log is folded into
//     the snapshot, so the open replays the segment and renames it over
//     the log;
//   - snapshot G+1 and log G+1: an ordinary open.
// A graph or lexical index of the next generation beside snapshot G is
// rebuilt on open, with a log line.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// nextLogFileName is the log segment a running compaction sends the writes
// to (see the top of this file).
const nextLogFileName = "embedded.next.log"

// errNotYet means a follower saw the files between two renames of a
// writer's compaction: it tries again at its next Reload.
var errNotYet = errors.New("index files are being replaced")

// loaded is an index read from disk, not yet visible to searches.
type loaded struct {
	st      *state
	gen     uint64
	snap    fileID // zero when there is no snapshot
	logID   fileID // zero when there is no log
	logGen  uint64 // the snapshot generation the log follows
	logBase int64  // the log header's size
	// logEnd is the offset just past the last record replayed; 0 when the
	// log was not replayed (there is none, or it follows another snapshot).
	logEnd  int64
	torn    bool // the log ends in an interrupted record
	rebuilt bool // the graph was rebuilt from the vectors
	// seg is the log segment of a compaction a crash interrupted (writer
	// only).
	seg segment
	// What the open did and how long each phase took.
	logRecs, logChunks                          int
	readT, lexT, graphT, replayT, segT, finishT time.Duration
	// lexHow says how the lexical index was made (loadLexical).
	lexHow string
}

// segment is what load found of embedded.next.log.
type segment struct {
	present   bool
	base, end int64
	torn      bool
	recs      int
}

// load reads the snapshot, its graph and the log into a fresh state; a
// writer (follow unset) also replays the segment of an interrupted
// compaction. A follower gets errNotYet rather than rebuilding a graph
// that does not match the snapshot, since that happens while a compaction
// renames its files; it leaves a segment alone (its records reach it once
// the compaction renames the segment over the log).
func (ix *Index) load(follow bool) (*loaded, error) {
	ld := &loaded{st: ix.newState(), lexHow: "no snapshot"}
	_, err := os.Stat(ix.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("checking index file: %w", err)
	default:
		// Room for the logs' chunks: at most one per vector's bytes.
		var logBytes int64
		for _, p := range []string{ix.logPath, ix.nextPath} {
			if fi, err := os.Stat(p); err == nil {
				logBytes += fi.Size()
			}
		}
		t := time.Now()
		st, gen, id, err := ix.readFileAt(ix.path, int(logBytes/int64(4*ix.dim)))
		if err != nil {
			return nil, err
		}
		ld.readT = time.Since(t)
		t = time.Now()
		ld.lexHow = ix.loadLexical(st, gen, ix.writable && !follow)
		ld.lexT = time.Since(t)
		ld.st, ld.gen, ld.snap = st, gen, id
		if !ix.exact {
			t = time.Now()
			if err := ix.loadGraph(ld, follow); err != nil {
				return nil, err
			}
			ld.graphT = time.Since(t)
		}
	}
	first := len(ld.st.alive)
	t := time.Now()
	if err := ix.replayLog(ld); err != nil {
		return nil, err
	}
	ld.replayT = time.Since(t)
	if !follow {
		t = time.Now()
		if err := ix.replaySegment(ld); err != nil {
			return nil, err
		}
		ld.segT = time.Since(t)
	}
	if ld.st.graph != nil {
		ld.st.graph.grow(len(ld.st.alive)) // here, not under the write lock once visible
	}
	switch {
	case ld.rebuilt:
		ld.st.unlinked = liveFrom(ld.st, 0)
	case ld.st.graph != nil && len(ld.st.alive) > first:
		ld.st.unlinked = liveFrom(ld.st, first)
	}
	if follow && ld.logID != (fileID{}) && ld.logGen > ld.gen {
		return nil, errNotYet
	}
	return ld, nil
}

// loadGraph reads the snapshot's graph file, or rebuilds the graph when
// there is none or it belongs to another generation. A damaged graph file
// is an error: it is derived data, but a flipped byte means the disk or
// something else is at fault, and rebuilding quietly would hide it.
func (ix *Index) loadGraph(ld *loaded, follow bool) error {
	path := filepath.Join(ix.dir, graphFileName)
	g, err := readGraph(path, len(ld.st.chunks), ld.gen)
	switch {
	case err == nil:
		ld.st.graph = g
		return nil
	case errors.Is(err, ErrCorrupt):
		return err
	case errors.Is(err, errGraphStale) && follow:
		return errNotYet
	case !errors.Is(err, errGraphStale) && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading HNSW graph file %s: %w", path, err)
	}
	reason := err.Error()
	if errors.Is(err, fs.ErrNotExist) {
		reason = "no graph file (the index was written with --store-exact, or before graphs were saved)"
	}
	ld.st.graph = newGraph()
	ld.rebuilt = true
	ix.logger.Info("rebuilding the index's HNSW graph from its vectors in the background (searches scan the chunks not yet linked)",
		"file", path, "reason", reason, "chunks", ld.st.live)
	return nil
}

// replayLog applies the log's records to ld's state when the log follows
// ld's snapshot. Its cost is that of the records: each is decoded, its
// chunks analysed and filed; linking them into the graph is left to the
// background (load lists them in unlinked).
func (ix *Index) replayLog(ld *loaded) error {
	f, err := os.Open(ix.logPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening index log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading index log %s: %w", ix.logPath, err)
	}
	ld.logID = fileIDOf(fi)
	sc, err := ix.scanLog(f, ix.logPath, 0, 0, fi.Size(), ld.gen, func(rec *logRecord) error {
		ld.st.apply(ix.dim, rec)
		ld.logChunks += len(rec.chunks)
		return nil
	})
	if err != nil {
		return err
	}
	ld.logGen, ld.logBase = sc.gen, sc.base
	if sc.gen != ld.gen {
		return nil
	}
	ld.logEnd, ld.torn = sc.end, sc.torn
	ld.logRecs += sc.recs
	return nil
}

// replaySegment applies the records of the log segment an interrupted
// compaction left (see the top of this file): it follows the next
// generation when the log follows the snapshot (the compaction had not
// committed), else the snapshot's own.
func (ix *Index) replaySegment(ld *loaded) error {
	f, err := os.Open(ix.nextPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening index log segment: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading index log segment %s: %w", ix.nextPath, err)
	}
	want := ld.gen
	if ld.logEnd > 0 {
		want = ld.gen + 1
	}
	sc, err := ix.scanLog(f, ix.nextPath, 0, 0, fi.Size(), want, func(rec *logRecord) error {
		ld.st.apply(ix.dim, rec)
		ld.logChunks += len(rec.chunks)
		return nil
	})
	if err != nil {
		return err
	}
	if sc.gen != want {
		return fmt.Errorf("opening index: log segment %s follows snapshot generation %d, but %s is generation %d and %s follows %d: %w",
			ix.nextPath, sc.gen, ix.path, ld.gen, ix.logPath, ld.logGen, ErrCorrupt)
	}
	ld.seg = segment{present: true, base: sc.base, end: sc.end, torn: sc.torn, recs: sc.recs}
	ld.logRecs += sc.recs
	return nil
}

// open loads the index at OpenIndex and, for a writer, readies the log.
func (ix *Index) open() error {
	start := time.Now()
	var ld *loaded
	for try := 0; ; try++ {
		var err error
		if ld, err = ix.load(false); err != nil {
			return err
		}
		if ld.logID == (fileID{}) || ld.logGen <= ld.gen || try == 10 {
			break
		}
		time.Sleep(20 * time.Millisecond) // a writer is between a compaction's renames
	}
	if ld.logID != (fileID{}) && ld.logGen > ld.gen {
		return fmt.Errorf("opening index: log %s follows snapshot generation %d but %s is generation %d: %w",
			ix.logPath, ld.logGen, ix.path, ld.gen, ErrCorrupt)
	}
	ix.publish(ld)
	if ix.writable {
		t := time.Now()
		if err := ix.readyLog(ld); err != nil {
			return err
		}
		ld.finishT = time.Since(t)
	}
	ix.logger.Info("opened the index", "dir", ix.dir, "generation", ld.gen, "chunks", ld.st.live,
		"log_records", ld.logRecs, "log_chunks", ld.logChunks,
		"snapshot_read", ld.readT.Round(time.Millisecond), "lexical", ld.lexHow, "lexical_load", ld.lexT.Round(time.Millisecond),
		"graph_read", ld.graphT.Round(time.Millisecond), "log_replay", ld.replayT.Round(time.Millisecond),
		"segment_replay", ld.segT.Round(time.Millisecond), "log_ready", ld.finishT.Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond))
	ix.startLinking(ld)
	return nil
}

// readyLog opens (or starts) the log a writer appends to, finishing what a
// crash interrupted: a torn record, a compaction's last steps.
func (ix *Index) readyLog(ld *loaded) error {
	if ld.torn {
		ix.logger.Warn("dropped an interrupted record from the end of the index log (a write cut by a crash, never acknowledged)",
			"file", ix.logPath, "offset", ld.logEnd)
	}
	if ld.seg.torn {
		ix.logger.Warn("dropped an interrupted record from the end of the index log segment (a write cut by a crash, never acknowledged)",
			"file", ix.nextPath, "offset", ld.seg.end)
	}
	switch {
	case ld.seg.present && ld.logEnd > 0:
		// Cut before its commit point: the segment's records go back to
		// the end of the log they follow (a crash while copying leaves
		// some twice, which replays to the same state: each record sets a
		// whole document).
		l, err := openLogForAppend(ix.logPath, ld.logEnd, ld.logBase)
		if err != nil {
			return err
		}
		if err := l.fold(ix.nextPath, ld.seg.base, ld.seg.end); err != nil {
			l.f.Close()
			return err
		}
		if err := os.Remove(ix.nextPath); err != nil {
			l.f.Close()
			return fmt.Errorf("removing index log segment: %w", err)
		}
		if err := syncDir(ix.dir); err != nil {
			l.f.Close()
			return fmt.Errorf("syncing index directory %s: %w", ix.dir, err)
		}
		ix.logger.Info("appended the log segment of a compaction a crash interrupted to the index log",
			"file", ix.nextPath, "records", ld.seg.recs, "generation", ld.gen)
		ix.log = l
	case ld.seg.present:
		// Cut after its commit point: the segment is the new log.
		l, err := openLogForAppend(ix.nextPath, ld.seg.end, ld.seg.base)
		if err != nil {
			return err
		}
		if err := os.Rename(ix.nextPath, ix.logPath); err != nil {
			l.f.Close()
			return fmt.Errorf("finishing an interrupted compaction: %w", err)
		}
		if err := syncDir(ix.dir); err != nil {
			l.f.Close()
			return fmt.Errorf("syncing index directory %s: %w", ix.dir, err)
		}
		l.path = ix.logPath
		ix.logger.Info("finished a compaction a crash interrupted after its commit point: its log segment is now the log",
			"file", ix.logPath, "records", ld.seg.recs, "generation", ld.gen)
		ix.log = l
	case ld.logID == (fileID{}):
		if ld.snap != (fileID{}) {
			ix.logger.Info("migrating the index to the log-structured layout: starting a log beside the snapshot",
				"file", ix.logPath, "generation", ld.gen)
		}
		return ix.newLog(ld.gen)
	case ld.logEnd == 0:
		ix.logger.Info("replacing an index log the last compaction had folded into the snapshot (it was cut before its last step)",
			"file", ix.logPath, "log_generation", ld.logGen, "generation", ld.gen)
		return ix.newLog(ld.gen)
	default:
		l, err := openLogForAppend(ix.logPath, ld.logEnd, ld.logBase)
		if err != nil {
			return err
		}
		ix.log = l
	}
	return nil
}

// publish makes ld the searched state and records which files it came
// from. The caller holds writeMu (or nothing runs yet).
func (ix *Index) publish(ld *loaded) {
	ix.mu.Lock()
	ix.st = ld.st
	ix.version++
	ix.mu.Unlock()
	ix.snap, ix.logID, ix.logBase, ix.logEnd = ld.snap, ld.logID, ld.logBase, ld.logEnd
	ix.snapBytes = ld.snap.size
	ix.generation.Store(ld.gen)
}

// startLinking links ld's unlinked chunks in the background; a writer
// whose graph file was missing or stale then compacts, so that the next
// open finds a graph that matches.
func (ix *Index) startLinking(ld *loaded) {
	if len(ld.st.unlinked) == 0 {
		return
	}
	if len(ld.st.unlinked) < exactBelow/4 { // a few: at once, the log line is noise
		for ix.linkSome(ld.st, false) {
		}
	} else {
		ix.logger.Info("linking loaded chunks into the HNSW graph in the background (searches scan them exactly meanwhile)",
			"dir", ix.dir, "chunks", len(ld.st.unlinked))
		var after func()
		if ld.rebuilt && ix.writable && ix.compactAfter >= 0 {
			after = ix.startCompaction
		}
		ix.linkInBackground(ld.st, after)
		return
	}
	if ld.rebuilt && ix.writable && ix.compactAfter >= 0 {
		ix.startCompaction()
	}
}

// newLog starts an empty log following snapshot gen, replacing any.
func (ix *Index) newLog(gen uint64) error {
	h := logHeader(ix.dim, gen, ix.embedder)
	tmp, err := writeTemp(ix.dir, logFileName, func(f *os.File) error {
		_, err := f.Write(h)
		return err
	})
	if err == nil {
		if err = os.Rename(tmp, ix.logPath); err != nil {
			os.Remove(tmp)
		}
	}
	if err == nil {
		err = syncDir(ix.dir)
	}
	if err != nil {
		return fmt.Errorf("starting index log %s: %w", ix.logPath, err)
	}
	l, err := openLogForAppend(ix.logPath, int64(len(h)), int64(len(h)))
	if err != nil {
		return err
	}
	ix.log = l
	return nil
}

// removeTemp deletes the temporary files a crashed compaction (or a save
// of an older version) left in the index directory; only the writer may,
// since they could be its own.
func (ix *Index) removeTemp() error {
	entries, err := os.ReadDir(ix.dir)
	if err != nil {
		return fmt.Errorf("listing index directory: %w", err)
	}
	var removed []string
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if err := os.Remove(filepath.Join(ix.dir, e.Name())); err != nil {
			return fmt.Errorf("removing leftover temporary file: %w", err)
		}
		removed = append(removed, e.Name())
	}
	if len(removed) > 0 {
		ix.logger.Info("removed temporary files a crash left in the index directory", "dir", ix.dir, "files", removed)
	}
	return nil
}

// Reload applies what a writer in another process saved since this index
// last looked, and reports whether anything changed. New log records are
// read and applied in place (a few stat calls when nothing changed, so
// `ragtime serve --read-only` can poll it); a new snapshot (a compaction)
// is read whole while searches keep running on the old state, then swapped
// in (so for a moment both are in memory). A writable index never reloads:
// it holds the writer lock, so the files are its own.
func (ix *Index) Reload() (bool, error) {
	if ix.writable {
		return false, nil
	}
	ix.saveMu.Lock()
	defer ix.saveMu.Unlock()
	if ix.closed {
		return false, nil
	}
	return ix.reload()
}

// reload is Reload; the caller holds saveMu.
func (ix *Index) reload() (bool, error) {
	var snap fileID
	fi, err := os.Stat(ix.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, fmt.Errorf("checking index file: %w", err)
	default:
		snap = fileIDOf(fi)
	}
	if snap != ix.snap {
		ld, err := ix.load(true)
		if errors.Is(err, errNotYet) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		ix.writeMu.Lock()
		ix.publish(ld)
		ix.writeMu.Unlock()
		ix.startLinking(ld)
		return true, nil
	}
	fi, err = os.Stat(ix.logPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking index log: %w", err)
	}
	id := fileIDOf(fi)
	switch {
	case id.ino != ix.logID.ino:
		if ix.logEnd > ix.logBase {
			// Records of the previous log are applied: start over.
			ix.snap = fileID{}
			return ix.reload()
		}
		return ix.follow(id, 0)
	case ix.logEnd == 0 || fi.Size() <= ix.logEnd:
		return false, nil // a log of the previous generation, or nothing new
	default:
		return ix.follow(id, ix.logEnd)
	}
}

// follow applies the records of the log identified by id from offset from
// (0: a log not read yet) to the visible state. The caller holds saveMu.
func (ix *Index) follow(id fileID, from int64) (bool, error) {
	f, err := os.Open(ix.logPath)
	if err != nil {
		return false, fmt.Errorf("opening index log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("reading index log %s: %w", ix.logPath, err)
	}
	if fileIDOf(fi).ino != id.ino {
		return false, nil // replaced since the stat: next time
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	gen := ix.generation.Load()
	applied := 0
	sc, err := ix.scanLog(f, ix.logPath, from, ix.logBase, fi.Size(), gen, func(rec *logRecord) error {
		ix.applyLive(rec)
		applied++
		return nil
	})
	if from == 0 && err == nil {
		if sc.gen != gen {
			if sc.gen < gen { // the writer replaces it next: nothing to apply
				ix.logID, ix.logBase, ix.logEnd = id, sc.base, 0
			}
			return false, nil
		}
		ix.logBase = sc.base
	}
	if applied > 0 || from == 0 {
		ix.logID, ix.logEnd = id, sc.end
	}
	return applied > 0, err
}

// applyLive applies one record to the visible state, as ReplaceDocument
// and DeleteDocument do. The caller holds writeMu.
func (ix *Index) applyLive(rec *logRecord) {
	if rec.op == opDelete {
		ix.mu.Lock()
		if ix.st.remove(rec.docID) {
			ix.version++
		}
		ix.mu.Unlock()
		return
	}
	plans, _ := ix.plan(rec.docID, rec.vecs)
	ix.upsert(rec, plans)
}

// Generation returns the generation of the snapshot this index last read
// or wrote: 0 before the first compaction, one more after each.
func (ix *Index) Generation() uint64 { return ix.generation.Load() }

// Save makes every write so far durable: it fsyncs the log. A write is in
// the log (safe from a crash of the process) as soon as ReplaceDocument or
// DeleteDocument returns, and on disk (safe from a power loss) once Save
// returns; callers acknowledge a write after Save (the API does so per
// document, `ragtime ingest` every SaveEvery documents and at the end).
func (ix *Index) Save() error {
	if !ix.writable {
		return fmt.Errorf("saving index: %w", ErrReadOnly)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.log == nil {
		return fmt.Errorf("saving index: the index was closed")
	}
	return ix.log.sync()
}

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
}

// Compact writes the index as a new snapshot and graph and starts an empty
// log, dropping the chunks of replaced and deleted documents on disk and in
// memory. Searches and writes go on meanwhile: writes wait only for two
// short holds of the writer lock (see the top of this file). A writable
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

// catchUpRoom is how many chunks written during a compaction the state it
// reads back has room for before its arrays grow.
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
	// frozen is live's frozen copy, dropped once its files are written.
	frozen *state
	// idxTmp, graphTmp and lexTmp are the new files before their renames
	// (graphTmp is empty with no graph); nst is the new state read back
	// from them, id its snapshot file's identity (writeFiles).
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
	c.old.f.Close() // its records are all in the snapshot
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
// frozen for the files to be written from (c.frozen). The bulk of that
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
		cur.f.Sync() // its descriptor stays open: Close waits for compactMu
	}
	ix.writeMu.Lock()
	held := time.Now()
	if ix.log == nil {
		ix.writeMu.Unlock()
		c.seg.f.Close()
		os.Remove(ix.nextPath)
		return errors.New("the index was closed")
	}
	for ix.linkSome(ix.st, true) { // what a write may have loaded since: normally nothing
	}
	if err := ix.log.sync(); err != nil {
		ix.writeMu.Unlock()
		c.seg.f.Close()
		os.Remove(ix.nextPath)
		return err
	}
	c.old, c.live = ix.log, ix.st
	c.stats.LogBytes = c.old.size - c.old.base
	ix.prevLog, ix.log = c.old, c.seg
	c.frozen = c.live.freeze()
	ix.pending, ix.catching = nil, true
	c.stats.Freeze = time.Since(held)
	ix.writeMu.Unlock()
	ix.step("frozen")
	frozen := c.frozen
	c.stats.Documents, c.stats.Chunks, c.stats.Reclaimed = len(frozen.docs), frozen.live, len(frozen.alive)-frozen.live
	return nil
}

// writeFiles is step 3 of docs/index.md (Files), with no lock held: the
// snapshot and the graph of the frozen state are written as temporary
// files and read back as the new state (c.nst: the live chunks only,
// renumbered, and the graph without the deleted nodes), and the lexical
// index of that state (the snapshot's, nothing caught up yet) is written
// as a temporary file too. A crash during it leaves `*.tmp` files beside
// snapshot G, log G and segment G+1, which the next open removes; on
// failure the caller abandons the compaction.
func (ix *Index) writeFiles(c *compaction) error {
	gen, frozen := c.gen, c.frozen
	var err error
	c.idxTmp, err = writeTemp(ix.dir, indexFileName, func(f *os.File) error {
		return ix.writeState(&chunkSyncer{f: f}, frozen, gen)
	})
	if err == nil && frozen.graph != nil {
		c.graphTmp, err = writeTemp(ix.dir, graphFileName, func(f *os.File) error {
			return writeGraph(&chunkSyncer{f: f}, frozen, ix.dim, frozen.fileOrder(), gen)
		})
	}
	c.frozen, frozen = nil, nil
	if err == nil {
		// The reclaimed state: the live chunks only, renumbered, and the
		// graph without the deleted nodes.
		var nst *state
		nst, _, c.id, err = ix.readFileAt(c.idxTmp, catchUpRoom)
		c.nst = nst
		if err == nil {
			nst.indexAll()
			if !ix.exact {
				nst.graph, err = readGraph(c.graphTmp, len(nst.chunks), gen)
			}
		}
		if err == nil && nst.graph != nil {
			nst.graph.reserve(len(nst.chunks) + catchUpRoom)
		}
		if err != nil {
			err = fmt.Errorf("reading back the new snapshot: %w", err)
		}
	}
	if err == nil {
		// The lexical index of the state read back: the snapshot's, nothing
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
	ok := n <= cap(st.alive) && n <= cap(st.chunks) && n <= cap(st.lexID) && n*dim <= cap(st.vecs)
	if g := st.graph; ok && g != nil {
		ok = n <= cap(g.count0) && n*hnswCap0 <= cap(g.links0) && n*hnswCap0 <= cap(g.dists0)
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
		old.f.Close()
		return nil
	}
	if err := old.fold(ix.nextPath, seg.base, seg.size); err != nil {
		seg.broken = fmt.Errorf("a failed compaction could not return its log segment to the log: %w", err)
		old.f.Close()
		return err
	}
	ix.log = old
	seg.f.Close()
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
			"writes_held_freeze", st.Freeze.Round(time.Millisecond), "writes_held_swap", st.Swap.Round(time.Millisecond))
	}()
}

func (ix *Index) isClosing() bool {
	ix.bgMu.Lock()
	defer ix.bgMu.Unlock()
	return ix.closing
}

// DiskSize returns the bytes the index's files (snapshot, graph, lexical
// index, log and a compaction's log segment) take.
func (ix *Index) DiskSize() (int64, error) {
	var total int64
	for _, name := range []string{indexFileName, graphFileName, lexFileName, logFileName, nextLogFileName} {
		fi, err := os.Stat(filepath.Join(ix.dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		total += fi.Size()
	}
	return total, nil
}

// fileOrder lists the live slots as the snapshot lays them out: documents
// by id, chunks in order. The caller keeps st from changing.
func (st *state) fileOrder() []int32 {
	out := make([]int32, 0, st.live)
	ids := make([]string, 0, len(st.docs))
	for id := range st.docs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, st.docs[id].slots...)
	}
	return out
}

// writeTemp writes a temporary file beside name in dir (permissions 0644,
// fsynced) and returns its path; on failure it removes it.
func writeTemp(dir, name string, write func(*os.File) error) (string, error) {
	tmp, err := os.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return "", err
	}
	err = write(tmp)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	return tmp.Name(), nil
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// StoredEmbedder returns the embedder name and vector dimension the index
// under dataDir was built with (from its snapshot, else its log), so a
// command that only maintains the index (`ragtime compact`) need not be
// told them. An empty data dir is an error wrapping fs.ErrNotExist.
func StoredEmbedder(dataDir string) (string, int, error) {
	dir := filepath.Join(dataDir, indexDirName)
	for _, f := range []struct{ name, magic string }{{indexFileName, fileMagic}, {logFileName, logMagic}} {
		path := filepath.Join(dir, f.name)
		b, err := readPrefix(path, 8+4+8+4+1<<16)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("reading %s: %w", path, err)
		}
		r := &fileReader{r: bytes.NewReader(b), left: int64(len(b))}
		magic := string(r.bytes(len(f.magic))) // before the next read reuses the buffer
		dim := int(r.u32())
		r.u64() // generation
		name := r.str()
		if r.err != nil || magic != f.magic {
			return "", 0, fmt.Errorf("reading %s: not a ragtime index file: %w", path, ErrCorrupt)
		}
		return name, dim, nil
	}
	return "", 0, fmt.Errorf("no index under --data-dir %s: %w", dataDir, fs.ErrNotExist)
}

// readPrefix reads up to n bytes from the start of the file at path.
func readPrefix(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	m, err := io.ReadFull(f, b)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return b[:m], err
}
