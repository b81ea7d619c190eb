package retrieval

// The snapshot file format (embedded.idx; all integers little-endian),
// chosen so 100k × 512 floats load in one sequential read rather than
// through a text decoder. It is written whole only by a compaction (see
// compact.go); writes in between go to the log (indexlog.go). An index
// written before the log existed is a snapshot without a log, so it opens
// as it is and the writer starts a log beside it.
//
//	magic      8 bytes  "RAGTIDX1"
//	dimension  u32
//	generation u64      incremented by every save
//	embedder   str
//	documents  u32, then per document:
//	             doc id str, title str, content hash str, chunk count u32,
//	             then per chunk: text str, metadata pair count u32, key str, value str …
//	vectors    chunk count × dimension × f32, chunks in document order
//	checksum   u32      CRC-32C of everything before it
//
// where str is a u32 byte length followed by the bytes.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"slices"
	"time"

	"ragtime/pipeline"
)

const fileMagic = "RAGTIDX1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileID tells whether the index file was replaced since it was read: a save
// renames a new file into place, which changes the inode and the mtime.
type fileID struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func fileIDOf(fi fs.FileInfo) fileID {
	return fileID{ino: inodeOf(fi), size: fi.Size(), mtime: fi.ModTime()}
}

// writeState encodes st as a snapshot of generation gen and returns its
// checksum; the caller keeps st from changing.
func (ix *Index) writeState(f io.Writer, st *state, gen uint64) (uint32, error) {
	crc := crc32.New(castagnoli)
	w := &fileWriter{w: bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)}
	w.bytes([]byte(fileMagic))
	w.u32(uint32(ix.dim))
	w.u64(gen)
	w.str(ix.embedder)
	ids := make([]string, 0, len(st.docs))
	for id := range st.docs {
		ids = append(ids, id)
	}
	slices.Sort(ids) // a stable order makes equal indexes byte-identical
	w.u32(uint32(len(ids)))
	for _, id := range ids {
		e := st.docs[id]
		w.str(id)
		w.str(e.title)
		w.str(e.hash)
		w.u32(uint32(len(e.slots)))
		for _, s := range e.slots {
			c := &st.chunks[s]
			w.str(c.Text)
			keys := slices.Sorted(maps.Keys(c.Metadata))
			w.u32(uint32(len(keys)))
			for _, k := range keys {
				w.str(k)
				w.str(c.Metadata[k])
			}
		}
	}
	buf := make([]byte, 0, 4*ix.dim)
	for _, id := range ids {
		for _, s := range st.docs[id].slots {
			v := st.vecs.vec(s)
			if b := floatBytes(v); b != nil {
				w.bytes(b)
				continue
			}
			buf = buf[:0]
			for _, x := range v {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			}
			w.bytes(buf)
		}
	}
	err := w.finish(f, crc) // flushes into crc first
	return crc.Sum32(), err
}

// finish flushes what is buffered and appends sum's checksum of it,
// written straight to f so that it is not part of what it sums.
func (w *fileWriter) finish(f io.Writer, sum hash.Hash32) error {
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if w.err != nil {
		return w.err
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], sum.Sum32())
	_, err := f.Write(b[:])
	return err
}

type fileWriter struct {
	w   *bufio.Writer
	err error
}

func (w *fileWriter) bytes(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

func (w *fileWriter) u32(v uint32) { w.bytes(binary.LittleEndian.AppendUint32(nil, v)) }
func (w *fileWriter) u64(v uint64) { w.bytes(binary.LittleEndian.AppendUint64(nil, v)) }
func (w *fileWriter) str(s string) {
	w.u32(uint32(len(s)))
	if w.err == nil {
		_, w.err = w.w.WriteString(s)
	}
}

// readFileAt decodes the snapshot at path into a fresh state, its lexical
// index still empty (st.indexAll fills it), with room in its slab for
// extra more chunks (those of the log about to be replayed: growing the
// slab then would copy it, a cost of the snapshot's size rather than the
// log's). Every length is checked against what is left of the file
// before anything is allocated, so a corrupt or truncated file yields
// ErrCorrupt naming the file.
func (ix *Index) readFileAt(path string, extra int) (*state, uint64, fileID, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fileID{}, fmt.Errorf("opening index file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fileID{}, fmt.Errorf("reading index file %s: %w", path, err)
	}
	r := &fileReader{r: bufio.NewReaderSize(f, 1<<20), crc: crc32.New(castagnoli), left: fi.Size() - 4}
	corrupt := func(what string) error {
		return fmt.Errorf("reading index file %s: %s: %w (delete it and re-ingest)", path, what, ErrCorrupt)
	}
	if r.left < int64(len(fileMagic))+4+8+4+4 {
		return nil, 0, fileID{}, corrupt("file too short")
	}
	if string(r.bytes(len(fileMagic))) != fileMagic {
		return nil, 0, fileID{}, corrupt("not a ragtime index file")
	}
	dim := int(r.u32())
	gen := r.u64()
	embedder := r.str()
	if r.err != nil {
		return nil, 0, fileID{}, corrupt(r.err.Error())
	}
	if err := ix.compatible(path, dim, embedder); err != nil {
		return nil, 0, fileID{}, err
	}

	st := newState()
	ndocs := r.count(4 + 4 + 4 + 4) // a document takes at least 16 bytes
	for range ndocs {
		id, title, hash := r.str(), r.str(), r.str()
		nchunks := r.count(4 + 4 + 4*dim) // text length, metadata count, vector
		if r.err != nil {
			break
		}
		if _, dup := st.docs[id]; dup {
			return nil, 0, fileID{}, corrupt(fmt.Sprintf("document %q stored twice", id))
		}
		e := &docEntry{title: title, hash: hash, slots: make([]int32, nchunks)}
		for i := range nchunks {
			c := pipeline.Chunk{ID: ChunkID(id, i), DocID: id, Title: title, Index: i, Text: r.str()}
			if nmeta := r.count(8); nmeta > 0 {
				c.Metadata = make(map[string]string, nmeta)
				for range nmeta {
					k := r.str()
					c.Metadata[k] = r.str()
				}
			}
			e.slots[i] = int32(len(st.chunks))
			st.chunks = append(st.chunks, c)
		}
		st.docs[id] = e
	}
	n := len(st.chunks)
	if r.err == nil && r.left != int64(n)*int64(dim)*4 {
		return nil, 0, fileID{}, corrupt(fmt.Sprintf("expected %d vector bytes, found %d", int64(n)*int64(dim)*4, r.left))
	}
	if r.err != nil {
		return nil, 0, fileID{}, corrupt(r.err.Error())
	}
	st.vecs = makeSlab(dim, n, extra)
	st.vecs.pageRange(func(floats []float32) bool {
		r.floats(floats)
		return r.err == nil
	})
	if r.err != nil {
		return nil, 0, fileID{}, corrupt(r.err.Error())
	}
	want := r.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(r.r, sum[:]); err != nil || binary.LittleEndian.Uint32(sum[:]) != want {
		return nil, 0, fileID{}, corrupt("checksum mismatch")
	}
	finite := true
	st.vecs.pageRange(func(floats []float32) bool {
		for _, x := range floats {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				finite = false
			}
		}
		return finite
	})
	if !finite {
		return nil, 0, fileID{}, corrupt("non-finite vector component")
	}
	st.alive = make([]bool, n, n+extra)
	if cap(st.chunks) < n+extra {
		st.chunks = append(make([]pipeline.Chunk, 0, n+extra), st.chunks...)
	}
	for i := range st.alive {
		st.alive[i] = true
	}
	st.live = n
	st.sum = want
	return st, gen, fileIDOf(fi), nil
}

// compatible checks that the file at path, holding vectors of dimension dim
// from embedder, fits the configured embedder.
func (ix *Index) compatible(path string, dim int, embedder string) error {
	if embedder != ix.embedder {
		return fmt.Errorf(
			"opening index %s: it was built with embedder %q but %q is configured: set --embedder=%s, or ingest into a fresh --data-dir: %w",
			path, embedder, ix.embedder, embedder, ErrIncompatible)
	}
	if dim != ix.dim {
		return fmt.Errorf(
			"opening index %s: it holds %d-dimensional vectors but the embedder produces %d: set --embed-dimensions=%d, or ingest into a fresh --data-dir: %w",
			path, dim, ix.dim, dim, ErrIncompatible)
	}
	return nil
}

// fileReader reads the index format, hashing what it reads and tracking how
// many bytes are left before the checksum. The first error sticks.
type fileReader struct {
	r    io.Reader
	crc  hash.Hash32
	left int64
	err  error
	buf  []byte
}

var errTruncated = errors.New("unexpected end of file")

func (r *fileReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if int64(n) > r.left {
		r.err = errTruncated
		return nil
	}
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if r.into(b); r.err != nil {
		return nil
	}
	return b
}

// into reads len(b) bytes into b, as bytes does into its own buffer.
func (r *fileReader) into(b []byte) {
	if r.err != nil {
		return
	}
	if int64(len(b)) > r.left {
		r.err = errTruncated
		return
	}
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.err = errTruncated
		return
	}
	if r.crc != nil {
		r.crc.Write(b)
	}
	r.left -= int64(len(b))
}

func (r *fileReader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *fileReader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *fileReader) str() string {
	n := r.u32()
	if r.err == nil && int64(n) > r.left {
		r.err = fmt.Errorf("string of %d bytes exceeds the file", n)
		return ""
	}
	return string(r.bytes(int(n)))
}

// count reads an element count and checks that that many elements of at
// least minSize bytes fit in what is left, so a corrupt count cannot make
// the reader allocate gigabytes.
func (r *fileReader) count(minSize int) int {
	n := r.u32()
	if r.err == nil && int64(n)*int64(minSize) > r.left {
		r.err = fmt.Errorf("count %d exceeds the file", n)
		return 0
	}
	return int(n)
}

func (r *fileReader) floats(dst []float32) {
	if b := floatBytes(dst); b != nil {
		r.into(b)
		return
	}
	const block = 16384
	for len(dst) > 0 && r.err == nil {
		m := min(len(dst), block)
		b := r.bytes(4 * m)
		for i := range m {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		dst = dst[m:]
	}
}
