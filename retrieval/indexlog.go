package retrieval

// The index log (<data dir>/index/embedded.log) holds every document
// upsert and delete made since the last snapshot (embedded.idx), so a write
// appends a few kilobytes instead of rewriting the index. All integers
// little-endian; str is a u32 byte length followed by the bytes:
//
//	header   magic 8 bytes "RAGTLOG1", dimension u32, generation u64
//	         (the snapshot it follows), embedder str, CRC-32C u32 of the header
//	records  length u32, CRC-32C u32 of the length, CRC-32C u32 of the payload,
//	         payload:
//	           upsert: 1, doc id str, title str, content hash str, chunk count u32,
//	                   per chunk: text str, metadata pair count u32, key str, value str …,
//	                   then chunk count × dimension f32 (normalised vectors)
//	           delete: 2, doc id str
//
// A record whose header or payload is cut short, or that is followed by
// nothing but zero bytes, is the tail of a write a crash interrupted (never
// acknowledged): the writer truncates it on open. A record that is complete
// but fails its checksum is corruption, reported with the file and offset.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"ragtime/lexical"
	"ragtime/pipeline"
)

const (
	logMagic       = "RAGTLOG1"
	logFileName    = "embedded.log"
	recHeaderSize  = 12
	opUpsert       = 1
	opDelete       = 2
	maxRecordBytes = 1 << 30
)

// logRecord is one decoded log record.
type logRecord struct {
	op     byte
	docID  string
	title  string
	hash   string
	chunks []pipeline.Chunk
	vecs   []float32 // normalised, chunk i at vecs[i*dim:(i+1)*dim]
	// lex, when set, is each chunk's lexical analysis, made before the
	// writer's lock (not encoded: a replayed record is analysed as applied).
	lex []lexical.Doc
}

// logHeader encodes the header of a log that follows snapshot gen.
func logHeader(dim int, gen uint64, embedder string) []byte {
	b := []byte(logMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(dim))
	b = binary.LittleEndian.AppendUint64(b, gen)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(embedder)))
	b = append(b, embedder...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// encodeRecord frames rec's payload with its length and checksums.
func encodeRecord(dim int, rec *logRecord) []byte {
	var buf bytes.Buffer
	buf.Write(make([]byte, recHeaderSize))
	w := &fileWriter{w: bufio.NewWriterSize(&buf, 4096)}
	w.bytes([]byte{rec.op})
	w.str(rec.docID)
	if rec.op == opUpsert {
		w.str(rec.title)
		w.str(rec.hash)
		w.u32(uint32(len(rec.chunks)))
		for i := range rec.chunks {
			c := &rec.chunks[i]
			w.str(c.Text)
			keys := slices.Sorted(maps.Keys(c.Metadata))
			w.u32(uint32(len(keys)))
			for _, k := range keys {
				w.str(k)
				w.str(c.Metadata[k])
			}
		}
		fb := make([]byte, 0, 4*dim)
		for i := 0; i < len(rec.vecs); i += dim {
			fb = fb[:0]
			for _, x := range rec.vecs[i : i+dim] {
				fb = binary.LittleEndian.AppendUint32(fb, math.Float32bits(x))
			}
			w.bytes(fb)
		}
	}
	w.w.Flush() // a bytes.Buffer does not fail
	b := buf.Bytes()
	payload := b[recHeaderSize:]
	binary.LittleEndian.PutUint32(b[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[0:4], castagnoli))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(payload, castagnoli))
	return b
}

// decodePayload decodes one record's payload.
func decodePayload(dim int, p []byte) (logRecord, error) {
	r := &fileReader{r: bytes.NewReader(p), left: int64(len(p))}
	var rec logRecord
	if len(p) < 1 {
		return rec, errors.New("empty record")
	}
	rec.op = r.bytes(1)[0]
	rec.docID = r.str()
	switch rec.op {
	case opDelete:
	case opUpsert:
		rec.title, rec.hash = r.str(), r.str()
		n := r.count(4 + 4 + 4*dim)
		if r.err != nil {
			break
		}
		rec.chunks = make([]pipeline.Chunk, n)
		for i := range n {
			c := pipeline.Chunk{ID: ChunkID(rec.docID, i), DocID: rec.docID, Title: rec.title, Index: i, Text: r.str()}
			if nmeta := r.count(8); nmeta > 0 {
				c.Metadata = make(map[string]string, nmeta)
				for range nmeta {
					k := r.str()
					c.Metadata[k] = r.str()
				}
			}
			rec.chunks[i] = c
		}
		if r.err == nil && r.left != int64(n)*int64(dim)*4 {
			return rec, fmt.Errorf("expected %d vector bytes, found %d", int64(n)*int64(dim)*4, r.left)
		}
		rec.vecs = make([]float32, n*dim)
		r.floats(rec.vecs)
		for _, x := range rec.vecs {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return rec, errors.New("non-finite vector component")
			}
		}
	default:
		return rec, fmt.Errorf("unknown operation %d", rec.op)
	}
	if r.err != nil {
		return rec, r.err
	}
	if r.left != 0 {
		return rec, fmt.Errorf("%d bytes left over", r.left)
	}
	if rec.docID == "" {
		return rec, errors.New("empty doc id")
	}
	return rec, nil
}

// logScan is what scanLog found.
type logScan struct {
	gen  uint64 // the snapshot generation the log follows
	base int64  // the header's size
	end  int64  // offset just past the last complete record
	torn bool   // bytes after end are an interrupted write
	recs int
}

// scanLog reads the log f (at path) from offset from (0: the header first; else
// base is the header's size) up to size bytes, calling fn for each complete
// record. When the header says the log follows another snapshot generation
// than wantGen it stops there, reporting that generation. A corrupt header
// or record is an error wrapping ErrCorrupt that names the file and offset;
// a mismatched dimension or embedder one wrapping ErrIncompatible.
func (ix *Index) scanLog(f *os.File, path string, from, base, size int64, wantGen uint64, fn func(*logRecord) error) (logScan, error) {
	dim := ix.dim
	corrupt := func(off int64, what string) error {
		return fmt.Errorf("reading index log %s at offset %d: %s: %w (move the file away to open the index without the writes it holds)", path, off, what, ErrCorrupt)
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, from, size-from), 1<<20)
	sc := logScan{gen: wantGen, base: base}
	if from == 0 {
		h := make([]byte, len(logMagic)+4+8+4)
		if _, err := io.ReadFull(r, h); err != nil {
			return sc, corrupt(0, "header cut short")
		}
		n := int64(binary.LittleEndian.Uint32(h[len(h)-4:]))
		if string(h[:len(logMagic)]) != logMagic || n > 1<<16 {
			return sc, corrupt(0, "not a ragtime index log")
		}
		rest := make([]byte, n+4)
		if _, err := io.ReadFull(r, rest); err != nil {
			return sc, corrupt(0, "header cut short")
		}
		all := append(h, rest[:n]...)
		if crc32.Checksum(all, castagnoli) != binary.LittleEndian.Uint32(rest[n:]) {
			return sc, corrupt(0, "header checksum mismatch")
		}
		sc.gen = binary.LittleEndian.Uint64(h[len(logMagic)+4:])
		if err := ix.compatible(path, int(binary.LittleEndian.Uint32(h[len(logMagic):])), string(rest[:n])); err != nil {
			return sc, err
		}
		from = int64(len(all) + 4)
		sc.base = from
		if sc.gen != wantGen {
			sc.end = from
			return sc, nil
		}
	}
	off := from
	sc.end = off
	var hdr [recHeaderSize]byte
	var payload []byte
	for off < size {
		left := size - off
		if left < recHeaderSize {
			sc.torn = true
			return sc, nil
		}
		io.ReadFull(r, hdr[:]) // within size: cannot fail short of an I/O error caught below
		n := int64(binary.LittleEndian.Uint32(hdr[0:]))
		if crc32.Checksum(hdr[0:4], castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) || n > maxRecordBytes {
			if zeroTail(f, off, size) {
				sc.torn = true
				return sc, nil
			}
			return sc, corrupt(off, "record header checksum mismatch")
		}
		if n > left-recHeaderSize {
			sc.torn = true
			return sc, nil
		}
		if int64(cap(payload)) < n {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return sc, fmt.Errorf("reading index log %s at offset %d: %w", path, off, err)
		}
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(hdr[8:]) {
			return sc, corrupt(off, "record checksum mismatch")
		}
		rec, err := decodePayload(dim, payload)
		if err != nil {
			return sc, corrupt(off, err.Error())
		}
		if err := fn(&rec); err != nil {
			return sc, err
		}
		off += recHeaderSize + n
		sc.end = off
		sc.recs++
	}
	return sc, nil
}

// zeroTail reports whether f holds only zero bytes from off to size: what a
// power loss can leave after the last write that reached the disk.
func zeroTail(f *os.File, off, size int64) bool {
	buf := make([]byte, 64<<10)
	for off < size {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if slices.ContainsFunc(buf[:n], func(b byte) bool { return b != 0 }) {
			return false
		}
		if err != nil && n == 0 {
			return false
		}
		off += int64(n)
	}
	return true
}

// indexLog is the writer's open log.
type indexLog struct {
	f    *os.File
	path string
	size int64 // end of the last complete record (writeMu)
	base int64 // size of the header
	// written is size, for syncUpTo, which runs without writeMu. synced is
	// how much of the file an fsync has made durable, closed whether the
	// file is closed; syncMu guards both and serialises the fsyncs and the
	// close, so that a Save never syncs a closed file.
	written atomic.Int64
	syncMu  sync.Mutex
	synced  int64
	closed  bool
	syncs   int // fsyncs made, for tests
	// broken is set when a failed append could not be undone: further
	// appends would follow a torn record, so they are refused.
	broken error
}

// openLogForAppend opens the log at path, whose valid content ends at end
// (anything after it is truncated).
func openLogForAppend(path string, end, base int64) (*indexLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening index log: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() != end {
		if err = f.Truncate(end); err == nil {
			err = f.Sync()
		}
	}
	if err == nil {
		_, err = f.Seek(end, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening index log %s: %w", path, err)
	}
	l := &indexLog{f: f, path: path, size: end, base: base, synced: end}
	l.written.Store(end)
	return l, nil
}

// append writes one framed record. On failure it cuts the file back to
// where it was, so the log never holds a torn record followed by others.
func (l *indexLog) append(rec []byte) error {
	if l.broken != nil {
		return fmt.Errorf("appending to index log %s: an earlier failed write could not be undone: %w", l.path, l.broken)
	}
	if _, err := l.f.Write(rec); err != nil {
		if terr := l.f.Truncate(l.size); terr != nil {
			l.broken = terr
		} else if _, serr := l.f.Seek(l.size, io.SeekStart); serr != nil {
			l.broken = serr
		}
		return fmt.Errorf("appending to index log %s: %w", l.path, err)
	}
	l.size += int64(len(rec))
	l.written.Store(l.size)
	return nil
}

// fold appends the records in [from, to) of the log file at path (a log
// segment) to l and syncs l. On failure it cuts l back to where it was.
func (l *indexLog) fold(path string, from, to int64) error {
	if l.broken != nil {
		return fmt.Errorf("appending to index log %s: an earlier failed write could not be undone: %w", l.path, l.broken)
	}
	src, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("appending index log segment %s to %s: %w", path, l.path, err)
	}
	defer src.Close()
	n, err := io.Copy(l.f, io.NewSectionReader(src, from, to-from))
	if err == nil && n != to-from {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		if terr := l.f.Truncate(l.size); terr != nil {
			l.broken = terr
		} else if _, serr := l.f.Seek(l.size, io.SeekStart); serr != nil {
			l.broken = serr
		}
		return fmt.Errorf("appending index log segment %s to %s: %w", path, l.path, err)
	}
	l.size += n
	l.written.Store(l.size)
	return l.sync()
}

// sync makes every appended record durable. The caller holds writeMu.
func (l *indexLog) sync() error { return l.syncUpTo(l.size) }

// syncUpTo makes the log durable up to offset upTo at least, with one
// fsync unless another one already covered it: Saves that come together
// share an fsync (a group commit), and writers append meanwhile, since an
// fsync makes durable what was written before it started. It needs no
// writeMu. A log closed since is durable as far as its closing made it
// (closeFile).
func (l *indexLog) syncUpTo(upTo int64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced >= upTo {
		return nil
	}
	if l.closed {
		return fmt.Errorf("syncing index log: the file was closed before its records were synced")
	}
	end := l.written.Load()
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("syncing index log: %w", err)
	}
	l.synced = end
	l.syncs++
	return nil
}

// closeFile closes the log's file once no fsync is running on it. With
// durable set its records are durable elsewhere (folded into a log that
// was synced, or in a committed snapshot), so a Save still waiting to sync
// them succeeds.
func (l *indexLog) closeFile(durable bool) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if durable {
		l.synced = max(l.synced, l.written.Load())
	}
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}

func (l *indexLog) close() error {
	if l.f == nil {
		return nil
	}
	err := l.sync()
	if cerr := l.closeFile(false); err == nil && cerr != nil {
		err = fmt.Errorf("closing index log %s: %w", l.path, cerr)
	}
	return err
}
