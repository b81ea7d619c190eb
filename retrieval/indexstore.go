package retrieval

// How the index's three files work together (docs/index.md has the whole
// story): embedded.idx is a snapshot of generation G, embedded.hnsw its
// HNSW graph (also G), embedded.log the writes made since (its header says
// it follows G). Opening reads the snapshot and the graph and replays the
// log; a write appends one record to the log; Save fsyncs the log; a
// compaction writes generation G+1 of all three as temporary files and
// renames them into place — the graph, then the snapshot (the commit
// point), then the empty log — so a crash between two renames leaves a
// graph of the next generation (rebuilt on open, with a log line) or a log
// of the previous one (whose records are all in the new snapshot:
// replaced on open).

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
}

// load reads the snapshot, its graph and the log into a fresh state. A
// follower (follow set) gets errNotYet rather than rebuilding a graph that
// does not match the snapshot, since that happens while a compaction
// renames its files.
func (ix *Index) load(follow bool) (*loaded, error) {
	ld := &loaded{st: ix.newState()}
	_, err := os.Stat(ix.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("checking index file: %w", err)
	default:
		st, gen, id, err := ix.readFile()
		if err != nil {
			return nil, err
		}
		ld.st, ld.gen, ld.snap = st, gen, id
		if !ix.exact {
			if err := ix.loadGraph(ld, follow); err != nil {
				return nil, err
			}
		}
	}
	if err := ix.replayLog(ld); err != nil {
		return nil, err
	}
	if ld.rebuilt {
		ld.st.unlinked = liveFrom(ld.st, 0)
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
// ld's snapshot, then links the chunks they added into the graph.
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
	first := int32(len(ld.st.alive))
	start := time.Now()
	chunks := 0
	sc, err := ix.scanLog(f, 0, 0, fi.Size(), ld.gen, func(rec *logRecord) error {
		ld.st.apply(ix.dim, rec)
		chunks += len(rec.chunks)
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
	if sc.recs > 0 {
		if ld.st.graph != nil && !ld.rebuilt {
			ld.st.unlinked = liveFrom(ld.st, int(first))
		}
		ix.logger.Info("replayed the index log", "file", ix.logPath, "records", sc.recs, "chunks", chunks,
			"took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// open loads the index at OpenIndex and, for a writer, readies the log.
func (ix *Index) open() error {
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
	if !ix.writable {
		ix.startLinking(ld)
		return nil
	}
	switch {
	case ld.logID == (fileID{}):
		if ld.snap != (fileID{}) {
			ix.logger.Info("migrating the index to the log-structured layout: starting a log beside the snapshot",
				"file", ix.logPath, "generation", ld.gen)
		}
		if err := ix.newLog(ld.gen); err != nil {
			return err
		}
	case ld.logEnd == 0:
		ix.logger.Info("replacing an index log the last compaction had folded into the snapshot (it was cut before its last step)",
			"file", ix.logPath, "log_generation", ld.logGen, "generation", ld.gen)
		if err := ix.newLog(ld.gen); err != nil {
			return err
		}
	default:
		if ld.torn {
			ix.logger.Warn("dropped an interrupted record from the end of the index log (a write cut by a crash, never acknowledged)",
				"file", ix.logPath, "offset", ld.logEnd)
		}
		l, err := openLogForAppend(ix.logPath, ld.logEnd, ld.logBase)
		if err != nil {
			return err
		}
		ix.log = l
	}
	ix.startLinking(ld)
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
	sc, err := ix.scanLog(f, from, ix.logBase, fi.Size(), gen, func(rec *logRecord) error {
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
}

// Compact writes the index as a new snapshot and graph and starts an empty
// log, dropping the chunks of replaced and deleted documents on disk and in
// memory. Searches run on meanwhile; writes wait for it. A writable index
// also compacts on its own, in the background, once the log passes
// IndexOptions.CompactAfter.
func (ix *Index) Compact(ctx context.Context) (CompactStats, error) {
	if !ix.writable {
		return CompactStats{}, fmt.Errorf("compacting index: %w", ErrReadOnly)
	}
	if err := ctx.Err(); err != nil {
		return CompactStats{}, fmt.Errorf("compacting index: %w", err)
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.log == nil {
		return CompactStats{}, fmt.Errorf("compacting index: the index was closed")
	}
	return ix.compact()
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
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	if ix.log == nil {
		return CompactStats{}, false, fmt.Errorf("compacting index: the index was closed")
	}
	if ix.log.size-ix.log.base <= n {
		return CompactStats{}, false, nil
	}
	if err := ctx.Err(); err != nil {
		return CompactStats{}, false, fmt.Errorf("compacting index: %w", err)
	}
	st, err := ix.compact()
	return st, err == nil, err
}

// compact is Compact; the caller holds writeMu, so st cannot change, and
// reads it under the read lock, which searches share.
func (ix *Index) compact() (CompactStats, error) {
	start := time.Now()
	stats := CompactStats{Generation: ix.generation.Load() + 1, LogBytes: ix.log.size - ix.log.base}
	stats.BytesBefore, _ = ix.DiskSize()
	gen := stats.Generation
	graphPath := filepath.Join(ix.dir, graphFileName)
	var tmps []string
	fail := func(err error) (CompactStats, error) {
		for _, t := range tmps {
			os.Remove(t)
		}
		return stats, fmt.Errorf("compacting the index in %s: %w", ix.dir, err)
	}
	// Anything not yet synced goes to disk first: the renames below must
	// not become durable before the writes they fold in.
	if err := ix.log.sync(); err != nil {
		return fail(err)
	}
	// The graph file must hold every chunk: finish linking first.
	for ix.linkSome(ix.st, true) {
	}
	ix.mu.RLock()
	st := ix.st
	stats.Documents, stats.Chunks, stats.Reclaimed = len(st.docs), st.live, len(st.alive)-st.live
	var graphTmp string
	idxTmp, err := writeTemp(ix.dir, indexFileName, func(f *os.File) error { return ix.writeState(f, st, gen) })
	if err == nil {
		tmps = append(tmps, idxTmp)
		if st.graph != nil {
			graphTmp, err = writeTemp(ix.dir, graphFileName, func(f *os.File) error {
				return writeGraph(f, st, ix.dim, st.fileOrder(), gen)
			})
			tmps = append(tmps, graphTmp)
		}
	}
	ix.mu.RUnlock()
	if err != nil {
		return fail(err)
	}
	h := logHeader(ix.dim, gen, ix.embedder)
	logTmp, err := writeTemp(ix.dir, logFileName, func(f *os.File) error {
		_, err := f.Write(h)
		return err
	})
	if err != nil {
		return fail(err)
	}
	tmps = append(tmps, logTmp)
	// The graph first: a crash right after it leaves a graph the snapshot
	// does not match, which the next open rebuilds.
	if graphTmp != "" {
		err = os.Rename(graphTmp, graphPath)
	} else if err = os.Remove(graphPath); errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if err == nil {
		err = os.Rename(idxTmp, ix.path) // the commit point
	}
	if err != nil {
		return fail(err)
	}
	ix.generation.Store(gen)
	old := ix.log
	if err := os.Rename(logTmp, ix.logPath); err != nil {
		// Appending to the old log would be lost: it now precedes the snapshot.
		old.broken = fmt.Errorf("the compaction to generation %d could not replace the log: %w", gen, err)
		return fail(err)
	}
	old.f.Close() // its records are all in the snapshot
	ix.log = &indexLog{path: ix.logPath, broken: errors.New("the log could not be reopened after a compaction")}
	if err := syncDir(ix.dir); err != nil {
		return fail(err)
	}
	l, err := openLogForAppend(ix.logPath, int64(len(h)), int64(len(h)))
	if err != nil {
		return fail(err)
	}
	ix.log = l

	// Reclaim memory: the snapshot just written, read back, holds the live
	// chunks only, renumbered, and the graph without the deleted nodes.
	nst, _, id, err := ix.readFile()
	if err == nil && !ix.exact {
		nst.graph, err = readGraph(graphPath, len(nst.chunks), gen)
	}
	if err != nil {
		return fail(fmt.Errorf("reading back the new snapshot: %w", err))
	}
	ix.mu.Lock()
	ix.st = nst
	ix.version++
	ix.mu.Unlock()
	ix.snap, ix.snapBytes = id, id.size
	stats.BytesAfter, _ = ix.DiskSize()
	stats.Took = time.Since(start)
	return stats, nil
}

// maybeCompact starts a background compaction when the log has outgrown
// its threshold. The caller holds writeMu.
func (ix *Index) maybeCompact() {
	if ix.compactAfter < 0 {
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
		ix.writeMu.Lock()
		defer ix.writeMu.Unlock()
		if ix.log == nil || ix.isClosing() {
			return
		}
		st, err := ix.compact()
		if err != nil {
			ix.logger.Error("compacting the index in the background", "err", err)
			return
		}
		ix.logger.Info("compacted the index", "dir", ix.dir, "generation", st.Generation, "documents", st.Documents,
			"chunks", st.Chunks, "reclaimed_chunks", st.Reclaimed, "log_bytes", st.LogBytes,
			"bytes_before", st.BytesBefore, "bytes_after", st.BytesAfter, "took", st.Took.Round(time.Millisecond))
	}()
}

func (ix *Index) isClosing() bool {
	ix.bgMu.Lock()
	defer ix.bgMu.Unlock()
	return ix.closing
}

// DiskSize returns the bytes the index's files (snapshot, graph and log)
// take.
func (ix *Index) DiskSize() (int64, error) {
	var total int64
	for _, name := range []string{indexFileName, graphFileName, logFileName} {
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
