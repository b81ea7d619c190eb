package spool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"ragtime"
)

// Defaults for Options.
const (
	DefaultMaxBytes     = 1 << 30
	DefaultSegmentBytes = 4 << 20
	DefaultSyncInterval = 100 * time.Millisecond
)

// MaxRecordBytes is the largest payload Append takes.
const MaxRecordBytes = 16 << 20

const (
	segmentSuffix = ".seg"
	lockFileName  = "LOCK"
	fileHeader    = "RTSPOOL1"
	frameHeader   = 20 // magic 4 + length 4 + time 8 + crc 4
	peekWindow    = 1 << 20
)

var (
	frameMagic = []byte("RTSR")
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Errors Append and Open return.
var (
	// ErrFull means the record does not fit under Options.MaxBytes.
	ErrFull = errors.New("spool is full")
	// ErrClosed means the spool was closed.
	ErrClosed = errors.New("spool is closed")
	// ErrLocked means another process has the spool directory open.
	ErrLocked = errors.New("spool directory is in use by another process")
)

// Options configure a Spool. Zero values take the defaults.
type Options struct {
	// MaxBytes bounds the segment files on disk; an Append past it fails
	// with ErrFull. Default 1 GiB.
	MaxBytes int64
	// SegmentBytes is the size past which appends start a new segment file.
	// Default 4 MiB.
	SegmentBytes int64
	// SyncInterval is how often the newest segment is fsynced while it has
	// unsynced appends. Default 100ms.
	SyncInterval time.Duration
	// Logger receives corrupt records and sync failures. Default
	// slog.Default().
	Logger *slog.Logger
}

// Entry is one record read from the spool.
type Entry struct {
	// Data is the payload given to Append.
	Data []byte
	// Time is the time given to Append.
	Time time.Time

	next position
}

// position is a place in the spool: a segment and a byte offset in it.
type position struct {
	seq uint64
	off int64
}

// segment is one segment file.
type segment struct {
	seq  uint64
	path string
	size int64 // bytes written and complete
}

// Spool is an on-disk FIFO of records; see the package documentation. Append
// is safe for concurrent use; Peek and Ack are meant for one reader.
type Spool struct {
	dir  string
	opts Options
	log  *slog.Logger
	lock *flock.Flock

	mu      sync.Mutex
	segs    []*segment // oldest first; the last one takes appends
	w       *os.File   // the last segment, open for writing; nil until the first append
	headOff int64      // next unread offset in segs[0]
	nextSeq uint64
	bytes   int64
	records int64
	oldest  time.Time
	corrupt int64
	dirty   bool
	closed  bool
	frame   []byte

	stop      chan struct{}
	syncDone  chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating it when missing) the spool in dir, takes its lock and
// counts the records a previous process left there, which Peek returns
// first. Close releases it.
func Open(dir string, opts Options) (*Spool, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = DefaultSyncInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create spool directory: %w", err)
	}
	s := &Spool{dir: dir, opts: opts, log: opts.Logger, stop: make(chan struct{}), syncDone: make(chan struct{})}
	if err := s.takeLock(); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		_ = s.lock.Close()
		return nil, err
	}
	go s.syncLoop()
	return s, nil
}

func (s *Spool) takeLock() error {
	name := filepath.Join(s.dir, lockFileName)
	l := flock.New(name, flock.SetPermissions(0o600))
	ok, err := l.TryLock()
	if err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	if !ok {
		return fmt.Errorf("%w (%s is held)", ErrLocked, name)
	}
	s.lock = l
	return nil
}

// load finds the segment files left in dir and counts their records.
func (s *Spool) load() error {
	names, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("list spool directory: %w", err)
	}
	for _, de := range names {
		name := de.Name()
		num, ok := strings.CutSuffix(name, segmentSuffix)
		if !ok || de.IsDir() {
			continue
		}
		seq, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			continue // not ours
		}
		path := filepath.Join(s.dir, name)
		fi, err := de.Info()
		if err != nil {
			return fmt.Errorf("stat spool segment %s: %w", path, err)
		}
		s.segs = append(s.segs, &segment{seq: seq, path: path, size: fi.Size()})
	}
	slices.SortFunc(s.segs, func(a, b *segment) int { return compareSeq(a.seq, b.seq) })
	for _, seg := range s.segs {
		data, err := os.ReadFile(seg.path)
		if err != nil {
			return fmt.Errorf("read spool segment %s: %w", seg.path, err)
		}
		seg.size = int64(len(data))
		s.bytes += seg.size
		start := int64(len(fileHeader))
		for off := start; off < int64(len(data)); {
			f, ok := parseFrame(data, off)
			if !ok {
				off = resync(data, off+1)
				continue
			}
			if s.records == 0 {
				s.oldest = f.t
			}
			s.records++
			off = f.next
		}
		s.nextSeq = seg.seq + 1
	}
	if len(s.segs) > 0 {
		s.headOff = int64(len(fileHeader))
	}
	return nil
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Append adds a record with its time (shown as Stats.Oldest while it is the
// oldest). It returns once the record is written to the segment file (in
// the page cache; fsynced within SyncInterval). It fails with ErrFull when
// the record would take the spool past MaxBytes, and ErrClosed after Close.
func (s *Spool) Append(data []byte, t time.Time) error {
	if len(data) > MaxRecordBytes {
		return fmt.Errorf("spool record of %d bytes is larger than %d", len(data), MaxRecordBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	need := int64(frameHeader + len(data))
	rotate := s.w == nil || s.segs[len(s.segs)-1].size >= s.opts.SegmentBytes
	if rotate {
		need += int64(len(fileHeader))
	}
	if s.bytes+need > s.opts.MaxBytes {
		return ErrFull
	}
	if rotate {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	seg := s.segs[len(s.segs)-1]
	s.frame = appendFrame(s.frame[:0], data, t)
	// WriteAt the committed end: a write that fails half-way is
	// overwritten by the next one, never read.
	if _, err := s.w.WriteAt(s.frame, seg.size); err != nil {
		return fmt.Errorf("write spool segment %s: %w", seg.path, err)
	}
	seg.size += int64(len(s.frame))
	s.bytes += int64(len(s.frame))
	if s.records == 0 {
		s.oldest = t
	}
	s.records++
	s.dirty = true
	return nil
}

// rotate syncs and closes the segment taking appends, if any, and starts a
// new one. Called with s.mu held.
func (s *Spool) rotate() error {
	if s.w != nil {
		if err := s.w.Sync(); err != nil {
			return fmt.Errorf("sync spool segment: %w", err)
		}
		if err := s.w.Close(); err != nil {
			return fmt.Errorf("close spool segment: %w", err)
		}
		s.w = nil
		s.dirty = false
	}
	seq := s.nextSeq
	path := filepath.Join(s.dir, fmt.Sprintf("%020d%s", seq, segmentSuffix))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create spool segment: %w", err)
	}
	if _, err := f.WriteAt([]byte(fileHeader), 0); err != nil {
		f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("write spool segment header %s: %w", path, err)
	}
	// The new file's name must survive a machine crash too.
	if err := syncDir(s.dir); err != nil {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	s.nextSeq++
	s.w = f
	if len(s.segs) == 0 {
		s.headOff = int64(len(fileHeader))
	}
	s.segs = append(s.segs, &segment{seq: seq, path: path, size: int64(len(fileHeader))})
	s.bytes += int64(len(fileHeader))
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open spool directory to sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync spool directory: %w", err)
	}
	return nil
}

// appendFrame appends data's frame to b.
func appendFrame(b, data []byte, t time.Time) []byte {
	start := len(b)
	b = append(b, frameMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint64(b, uint64(t.UnixNano()))
	b = binary.LittleEndian.AppendUint32(b, 0) // checksum, below
	b = append(b, data...)
	sum := crc32.Update(crc32.Checksum(b[start+4:start+16], castagnoli), castagnoli, data)
	binary.LittleEndian.PutUint32(b[start+16:], sum)
	return b
}

// frame is one parsed frame of a segment.
type frame struct {
	data []byte
	t    time.Time
	next int64
}

// parseFrame reads the frame at off in data; ok is false when it is corrupt
// or incomplete.
func parseFrame(data []byte, off int64) (frame, bool) {
	if off+frameHeader > int64(len(data)) || !bytes.Equal(data[off:off+4], frameMagic) {
		return frame{}, false
	}
	n := int64(binary.LittleEndian.Uint32(data[off+4:]))
	end := off + frameHeader + n
	if n > MaxRecordBytes || end > int64(len(data)) {
		return frame{}, false
	}
	payload := data[off+frameHeader : end]
	sum := crc32.Update(crc32.Checksum(data[off+4:off+16], castagnoli), castagnoli, payload)
	if sum != binary.LittleEndian.Uint32(data[off+16:]) {
		return frame{}, false
	}
	return frame{data: payload, t: time.Unix(0, int64(binary.LittleEndian.Uint64(data[off+8:]))), next: end}, true
}

// resync returns the offset of the first valid frame at or after off in
// data, or len(data) when there is none.
func resync(data []byte, off int64) int64 {
	for off < int64(len(data)) {
		i := bytes.Index(data[off:], frameMagic)
		if i < 0 {
			break
		}
		if _, ok := parseFrame(data, off+int64(i)); ok {
			return off + int64(i)
		}
		off += int64(i) + 1
	}
	return int64(len(data))
}

// Peek returns up to max records from the oldest, without removing them;
// Ack removes them once they are stored elsewhere. Corrupt frames at the
// head are logged (file and offset), counted and skipped for good. An empty
// result means the spool holds nothing readable.
func (s *Spool) Peek(max int) ([]Entry, error) {
	var out []Entry
	for len(out) == 0 {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		if len(s.segs) == 0 {
			s.mu.Unlock()
			return nil, nil
		}
		seg := *s.segs[0]
		headOff := s.headOff
		last := len(s.segs) == 1
		s.mu.Unlock()

		// Read a window from the head, not the whole segment: a drain
		// peeks a batch at a time.
		end := min(seg.size, headOff+peekWindow)
		data, err := readRange(seg, headOff, end)
		if err != nil {
			return nil, err
		}
		off := int64(0) // in data, which starts at headOff
		for headOff+off < seg.size && len(out) < max {
			f, ok := parseFrame(data, off)
			if !ok {
				break
			}
			out = append(out, Entry{Data: f.data, Time: f.t, next: position{seq: seg.seq, off: headOff + f.next}})
			off = f.next
		}
		if len(out) > 0 {
			return out, nil
		}
		if headOff < seg.size {
			if end < seg.size {
				// A frame larger than the window, or corruption: look
				// at the rest of the segment.
				if data, err = readRange(seg, headOff, seg.size); err != nil {
					return nil, err
				}
				if f, ok := parseFrame(data, 0); ok {
					return []Entry{{Data: f.data, Time: f.t, next: position{seq: seg.seq, off: headOff + f.next}}}, nil
				}
			}
			// Corrupt at the head: skip it for good.
			to := resync(data, 1)
			s.log.Error("spool: corrupt record skipped",
				"file", seg.path, "offset", headOff, "skipped_bytes", to, "reason", corruptReason(data, 0))
			s.advance(position{seq: seg.seq, off: headOff + to}, 0, true) // false: it changed under us; look again
			continue
		}
		if last {
			return nil, nil // everything appended has been read
		}
		// The head segment is read to its end: move to the next one.
		s.advance(position{seq: seg.seq, off: seg.size}, 0, false)
	}
	return out, nil
}

// corruptReason says what is wrong with the frame at off.
func corruptReason(data []byte, off int64) string {
	switch {
	case off+frameHeader > int64(len(data)):
		return "truncated frame header"
	case !bytes.Equal(data[off:off+4], frameMagic):
		return "bad frame magic"
	}
	n := int64(binary.LittleEndian.Uint32(data[off+4:]))
	switch {
	case n > MaxRecordBytes:
		return fmt.Sprintf("frame length %d too large", n)
	case off+frameHeader+n > int64(len(data)):
		return "truncated frame"
	}
	return "checksum mismatch"
}

// readRange reads bytes [from, to) of seg.
func readRange(seg segment, from, to int64) ([]byte, error) {
	f, err := os.Open(seg.path)
	if err != nil {
		return nil, fmt.Errorf("open spool segment: %w", err)
	}
	defer f.Close()
	data := make([]byte, to-from)
	if _, err := f.ReadAt(data, from); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read spool segment %s: %w", seg.path, err)
	}
	return data, nil
}

// Ack removes the records of done, a prefix of what Peek returned, from the
// spool; segment files read to their end are deleted.
func (s *Spool) Ack(done []Entry) error {
	if len(done) == 0 {
		return nil
	}
	if !s.advance(done[len(done)-1].next, int64(len(done)), false) {
		return errors.New("spool: Ack of records that are not at the head")
	}
	return nil
}

// advance moves the head to p, which must be in the head segment, removing
// n records (and counting a skipped corrupt run when corrupt). It reports
// false when the head is no longer in p's segment.
func (s *Spool) advance(p position, n int64, corrupt bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.segs) == 0 || s.segs[0].seq != p.seq || p.off < s.headOff {
		return false
	}
	s.headOff = p.off
	s.records -= n
	if corrupt {
		s.corrupt++
	}
	// Delete the head segment once it is read to its end, unless it
	// still takes appends and is the only one.
	for len(s.segs) > 0 && s.headOff >= s.segs[0].size {
		if len(s.segs) == 1 {
			if s.w != nil {
				if s.records > 0 {
					break
				}
				_ = s.w.Close()
				s.w = nil
				s.dirty = false
			}
		}
		head := s.segs[0]
		if err := os.Remove(head.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("spool: removing a drained segment failed", "file", head.path, "err", err)
		}
		s.bytes -= head.size
		s.segs = s.segs[1:]
		s.headOff = int64(len(fileHeader))
	}
	if len(s.segs) == 0 {
		s.segs = nil
		s.records = 0 // what corruption hid is gone with its file
	}
	s.oldest = time.Time{}
	if s.records > 0 {
		s.oldest = s.peekTime()
	}
	return true
}

// peekTime is the time of the frame at the head, read without checking its
// checksum (it is only shown); now when it cannot be read. Called with s.mu
// held.
func (s *Spool) peekTime() time.Time {
	f, err := os.Open(s.segs[0].path)
	if err == nil {
		defer f.Close()
		var h [frameHeader]byte
		if _, err := f.ReadAt(h[:], s.headOff); err == nil && bytes.Equal(h[:4], frameMagic) {
			return time.Unix(0, int64(binary.LittleEndian.Uint64(h[8:])))
		}
	}
	return time.Now()
}

// Stats returns what the spool holds now.
func (s *Spool) Stats() ragtime.SpoolStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ragtime.SpoolStats{Bytes: s.bytes, Records: s.records, Oldest: s.oldest, Corrupt: s.corrupt}
	if !s.oldest.IsZero() {
		st.OldestAgeSeconds = max(0, time.Since(s.oldest).Seconds())
	}
	return st
}

// Dir returns the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// Sync fsyncs what was appended so far.
func (s *Spool) Sync() error {
	s.mu.Lock()
	w := s.w
	dirty := s.dirty
	s.dirty = false
	s.mu.Unlock()
	if w == nil || !dirty {
		return nil
	}
	if err := w.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		return fmt.Errorf("sync spool segment: %w", err)
	}
	return nil
}

// syncLoop fsyncs every SyncInterval until Close.
func (s *Spool) syncLoop() {
	defer close(s.syncDone)
	t := time.NewTicker(s.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if err := s.Sync(); err != nil {
				s.log.Error("spool: fsync failed; appended records survive a process crash but not yet a machine crash", "dir", s.dir, "err", err)
			}
		}
	}
}

// Close fsyncs, closes the segment files and releases the directory lock.
// The records it holds stay on disk for the next Open.
func (s *Spool) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.syncDone
		err := s.Sync()
		s.mu.Lock()
		s.closed = true
		if s.w != nil {
			if cerr := s.w.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close spool segment: %w", cerr)
			}
			s.w = nil
		}
		s.mu.Unlock()
		if cerr := s.lock.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("release spool lock: %w", cerr)
		}
		s.closeErr = err
	})
	return s.closeErr
}
