package lexical

// An Index saved to a file, so a store that keeps its chunks' text need
// not analyse all of it again when it opens (the embedded store writes one
// beside each snapshot). All integers little-endian; str is a u32 byte
// length and the bytes:
//
//	magic      8 bytes "RAGTLEX1"
//	generation u64     FileStamp.Generation: what the file was derived from
//	source     u32     FileStamp.Source (the embedded store: its snapshot's checksum)
//	analyzer   str     Analyzer, version u32 AnalyzerVersion, title boost u32
//	ids        u32     N, then N × (caller's number i32, -1 dead; length u32)
//	terms      u32     then per term, sorted: term str, df u32, last id u32,
//	                   postings str (the delta-coded varints of Index)
//	checksum   u32     CRC-32C of everything before it
//
// A file of another stamp or analyzer is ErrFileStale; one that fails its
// checksum or does not decode is ErrFileCorrupt. Either way the caller
// rebuilds the index from the text.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
)

// AnalyzerVersion numbers the output of Terms (and Analyse's title boost):
// bump it with any change that makes Terms return other terms for some
// text, so that saved index files made under the old analyzer are rebuilt
// rather than searched with the new one. TestAnalyzerVersionPinned fails
// when Terms changes and the version does not.
const AnalyzerVersion = 1

const fileMagic = "RAGTLEX1"

// FileStamp ties a saved index to the data it was derived from; ReadFile
// accepts a file only under the stamp it was written with.
type FileStamp struct {
	// Generation is the source's generation (the embedded store's
	// snapshot generation).
	Generation uint64
	// Source is a checksum of the source (the snapshot file's CRC-32C),
	// so a file is never taken for another source of the same generation.
	Source uint32
}

var (
	// ErrFileStale means a sound index file that belongs to another source
	// or analyzer.
	ErrFileStale = errors.New("lexical index file is stale")
	// ErrFileCorrupt means an index file that fails its checksum or does
	// not decode.
	ErrFileCorrupt = errors.New("lexical index file is corrupt")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteFile writes x to w under stamp (see the top of this file). x must
// not change meanwhile.
func (x *Index) WriteFile(w io.Writer, stamp FileStamp) error {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<20)
	var b []byte
	put32 := func(v uint32) { b = binary.LittleEndian.AppendUint32(b, v) }
	str := func(s string) { put32(uint32(len(s))); b = append(b, s...) }
	flush := func() error {
		_, err := bw.Write(b)
		b = b[:0]
		return err
	}
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint64(b, stamp.Generation)
	put32(stamp.Source)
	str(Analyzer)
	put32(AnalyzerVersion)
	put32(TitleBoost)
	put32(uint32(len(x.ext)))
	for i, e := range x.ext {
		put32(uint32(e))
		put32(x.lens[i])
		if len(b) >= 64<<10 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	terms := make([]string, 0, len(x.terms))
	for t := range x.terms {
		terms = append(terms, t)
	}
	slices.Sort(terms)
	put32(uint32(len(terms)))
	for _, t := range terms {
		p := x.terms[t]
		str(t)
		put32(p.df)
		put32(p.last)
		put32(uint32(len(p.data)))
		if err := flush(); err != nil {
			return err
		}
		if _, err := bw.Write(p.data); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

// ReadFile decodes an index file written by WriteFile under stamp. The
// whole file's checksum is verified before anything in it is believed, and
// every posting is checked against the ids, so a file that passes cannot
// make a search index out of range. The postings share data's memory.
func ReadFile(data []byte, stamp FileStamp) (*Index, error) {
	corrupt := func(what string) error { return fmt.Errorf("%w: %s", ErrFileCorrupt, what) }
	if len(data) < len(fileMagic)+8+4+4+4+4+4+4+4 {
		return nil, corrupt("file too short")
	}
	body := data[:len(data)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(body):]) {
		return nil, corrupt("checksum mismatch")
	}
	r := &reader{b: body}
	if string(r.next(len(fileMagic))) != fileMagic {
		return nil, corrupt("not a lexical index file")
	}
	gen := binary.LittleEndian.Uint64(r.next(8))
	src := r.u32()
	analyzer, version, boost := string(r.str()), r.u32(), r.u32()
	if r.err != nil {
		return nil, corrupt(r.err.Error())
	}
	switch {
	case analyzer != Analyzer || version != AnalyzerVersion || boost != TitleBoost:
		return nil, fmt.Errorf("%w: made by analyzer %s version %d (title boost %d), this is %s version %d (title boost %d)",
			ErrFileStale, analyzer, version, boost, Analyzer, AnalyzerVersion, TitleBoost)
	case gen != stamp.Generation || src != stamp.Source:
		return nil, fmt.Errorf("%w: made from generation %d (checksum %08x), this is generation %d (checksum %08x)",
			ErrFileStale, gen, src, stamp.Generation, stamp.Source)
	}
	n := r.count(8)
	x := &Index{bm25: NewBM25(), ext: make([]int32, n), lens: make([]uint32, n)}
	for i := range n {
		x.ext[i], x.lens[i] = int32(r.u32()), r.u32()
		if x.ext[i] >= 0 {
			x.live++
			x.total += uint64(x.lens[i])
		}
	}
	nterms := r.count(4 + 4 + 4 + 4)
	x.terms = make(map[string]*postings, nterms)
	for range nterms {
		t := string(r.str())
		p := &postings{df: r.u32(), last: r.u32()}
		d := r.str()
		if r.err != nil {
			break
		}
		p.data = d[:len(d):len(d)] // Add appends: never into the next term's bytes
		if _, dup := x.terms[t]; dup {
			return nil, corrupt(fmt.Sprintf("term %q stored twice", t))
		}
		if err := p.check(n); err != nil {
			return nil, corrupt(fmt.Sprintf("term %q: %v", t, err))
		}
		x.terms[t] = p
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d bytes left over", len(r.b))
	}
	if r.err != nil {
		return nil, corrupt(r.err.Error())
	}
	return x, nil
}

// check verifies that p's postings decode to df ascending ids below n,
// the last of them last.
func (p *postings) check(n int) error {
	var count uint32
	id := uint64(0)
	for data := p.data; len(data) > 0; count++ {
		gap, g := binary.Uvarint(data)
		if g <= 0 {
			return errors.New("bad id gap")
		}
		_, f := binary.Uvarint(data[g:])
		if f <= 0 {
			return errors.New("bad frequency")
		}
		data = data[g+f:]
		if count > 0 && gap == 0 {
			return errors.New("ids not ascending")
		}
		id += gap
		if id >= uint64(n) {
			return fmt.Errorf("id %d out of range", id)
		}
	}
	if count != p.df || count == 0 || uint32(id) != p.last {
		return fmt.Errorf("%d postings ending at %d, header says %d ending at %d", count, id, p.df, p.last)
	}
	return nil
}

// reader decodes the file's body; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) next(n int) []byte {
	if r.err != nil {
		return make([]byte, n)
	}
	if n < 0 || n > len(r.b) {
		r.err = errors.New("truncated")
		return make([]byte, max(n, 0))
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.next(4)) }

func (r *reader) str() []byte {
	n := r.u32()
	if r.err == nil && int64(n) > int64(len(r.b)) {
		r.err = errors.New("truncated")
		return nil
	}
	return r.next(int(n))
}

// count reads a count of items of at least size bytes each, checked
// against what is left so that a corrupt count allocates nothing.
func (r *reader) count(size int) int {
	n := r.u32()
	if r.err == nil && int64(n)*int64(size) > int64(len(r.b)) {
		r.err = fmt.Errorf("count %d exceeds the file", n)
		return 0
	}
	if n > math.MaxInt32 {
		return 0
	}
	return int(n)
}

// Identity reports whether every id of x is live and its caller's number
// is the id itself: an index built over a fresh snapshot's slots in order,
// as the embedded store writes them.
func (x *Index) Identity() bool {
	for i, e := range x.ext {
		if e != int32(i) {
			return false
		}
	}
	return true
}
