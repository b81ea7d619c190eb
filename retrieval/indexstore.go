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
// graph of that frozen state as temporary files, builds the state they
// open as (the reclaimed state: live chunks only, renumbered) beside the
// write, writes the lexical index of that state, and commits: the graph, the lexical index, then the snapshot (the commit
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
	switch {
	case !follow, ld.logID != (fileID{}) && ld.logGen < ld.gen:
		// A follower reads the segment only between a compaction's commit
		// and the segment's rename: the log is the one the snapshot folds
		// in, and the writes made since the compaction's freeze, which it
		// may show already, are in the segment, which follows the snapshot.
		t = time.Now()
		if err := ix.replaySegment(ld, follow); err != nil {
			return nil, err
		}
		ld.segT = time.Since(t)
	}
	if ld.st.graph == nil && ix.wantsGraph(ld.st) { // the log took it past the graph threshold
		ld.st.graph = newGraph()
		ld.rebuilt = true
		ix.logGraphStart(ld.st)
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
	if !ix.wantsGraph(ld.st) {
		return nil // below the graph threshold: searched exactly (load looks again after the log)
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
// committed), else the snapshot's own. A follower (follow set) reads the
// segment of a running compaction that has committed, which its writer is
// still appending to: a record being written is left for the next poll
// (which, once the segment is the log, reads it from its start: applying
// a record twice changes nothing), and a segment already renamed or of
// another generation is errNotYet, since the files are moving.
func (ix *Index) replaySegment(ld *loaded, follow bool) error {
	f, err := os.Open(ix.nextPath)
	if errors.Is(err, fs.ErrNotExist) {
		if follow {
			return errNotYet
		}
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
	if sc.gen != want && follow {
		return errNotYet
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
			l.closeFile(false)
			return err
		}
		if err := os.Remove(ix.nextPath); err != nil {
			l.closeFile(false)
			return fmt.Errorf("removing index log segment: %w", err)
		}
		if err := syncDir(ix.dir); err != nil {
			l.closeFile(false)
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
			l.closeFile(false)
			return fmt.Errorf("finishing an interrupted compaction: %w", err)
		}
		if err := syncDir(ix.dir); err != nil {
			l.closeFile(false)
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
		ix.segID, ix.segBase, ix.segEnd = fileID{}, 0, 0
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
	var changed bool
	switch {
	case id.ino != ix.logID.ino:
		if ix.logEnd > ix.logBase {
			// Records of the previous log are applied: start over.
			ix.snap = fileID{}
			return ix.reload()
		}
		changed, err = ix.follow(id, 0)
	case ix.logEnd == 0 || fi.Size() <= ix.logEnd:
		// a log of the previous generation, or nothing new
	default:
		changed, err = ix.follow(id, ix.logEnd)
		// The log grew: no compaction is past its freeze, or one was
		// given up and its segment's records appended to the log (a new
		// segment starts again from its beginning).
		ix.segID, ix.segBase, ix.segEnd = fileID{}, 0, 0
	}
	if err != nil {
		return changed, err
	}
	seg, err := ix.followSegment()
	return changed || seg, err
}

// followSegment applies the records a running compaction's log segment
// holds beyond those applied: from its freeze on, the writer appends there,
// and a follower that waited for the commit would not see a write for the
// whole compaction (seconds to tens of seconds for a large index). It reads
// the segment only once the log it follows is complete (the writer fsyncs
// it at the freeze, and then never appends to it again unless the
// compaction is given up, when the log grows and reload starts the segment
// over): a record that reached the log before the freeze must be applied
// before the segment's. Applying a record twice (a segment re-read) is
// harmless: each replaces or deletes a whole document. Where files have no
// inode number (inodeOf), a segment cannot be told from a later one, and
// the follower waits for the commit as before. The caller holds saveMu.
func (ix *Index) followSegment() (bool, error) {
	if ix.logEnd == 0 {
		return false, nil // the followed log is not this snapshot's: the commit is past
	}
	f, err := os.Open(ix.nextPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("opening index log segment: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("reading index log segment %s: %w", ix.nextPath, err)
	}
	id := fileIDOf(fi)
	if id.ino == 0 {
		return false, nil
	}
	from, base := int64(0), int64(0)
	if id.ino == ix.segID.ino {
		if fi.Size() <= ix.segEnd {
			return false, nil
		}
		from, base = ix.segEnd, ix.segBase
	}
	gen := ix.generation.Load()
	var recs []*logRecord
	sc, err := ix.scanLog(f, ix.nextPath, from, base, fi.Size(), gen+1, func(rec *logRecord) error {
		recs = append(recs, rec)
		return nil
	})
	if err != nil || sc.gen != gen+1 {
		return false, err // another compaction's: the writer removes it
	}
	if li, err := os.Stat(ix.logPath); err != nil || fileIDOf(li).ino != ix.logID.ino || li.Size() != ix.logEnd {
		return false, nil // the log is not complete yet, or was replaced: next time
	}
	ix.writeMu.Lock()
	for _, rec := range recs {
		ix.applyLive(rec)
	}
	if len(recs) > 0 {
		ix.startGraph()
	}
	ix.writeMu.Unlock()
	ix.segID, ix.segBase, ix.segEnd = id, sc.base, sc.end
	return len(recs) > 0, nil
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
	if applied > 0 {
		ix.startGraph()
	}
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
	plans, _ := ix.plan([]*logRecord{rec})
	ix.upsert(rec, plans, nil)
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
	l := ix.log
	if l == nil {
		ix.writeMu.Unlock()
		return fmt.Errorf("saving index: the index was closed")
	}
	upTo := l.size
	ix.writeMu.Unlock()
	// The fsync runs without writeMu: writers append meanwhile, and Saves
	// that come together share one fsync (syncUpTo).
	if err := l.syncUpTo(upTo); err != nil {
		return fmt.Errorf("saving index %s: %w", ix.dir, err)
	}
	return nil
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
