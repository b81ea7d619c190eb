package spool

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T, dir string, opts Options) *Spool {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func payload(i int) []byte {
	return []byte(fmt.Sprintf(`{"query_id":"q%05d","text":"%s"}`, i, strings.Repeat("x", i%97)))
}

// drain reads and acknowledges everything, batch by batch.
func drain(t *testing.T, s *Spool, batch int) []string {
	t.Helper()
	var got []string
	for {
		es, err := s.Peek(batch)
		if err != nil {
			t.Fatalf("Peek: %v", err)
		}
		if len(es) == 0 {
			return got
		}
		for _, e := range es {
			got = append(got, string(e.Data))
		}
		if err := s.Ack(es); err != nil {
			t.Fatalf("Ack: %v", err)
		}
	}
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOrderAcrossSegmentsAndReopen appends across many segments, reads part,
// reopens (as after a crash) and reads the rest: oldest first, nothing lost
// or repeated past an Ack, and drained segments are deleted.
func TestOrderAcrossSegmentsAndReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir, Options{SegmentBytes: 1024})
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 300 {
		if err := s.Append(payload(i), t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Records != 300 || !st.Oldest.Equal(t0) || st.Bytes == 0 {
		t.Fatalf("Stats = %+v", st)
	}
	if n := len(segments(t, dir)); n < 10 {
		t.Fatalf("%d segments, want many with SegmentBytes 1024", n)
	}
	es, err := s.Peek(40)
	if err != nil || len(es) == 0 {
		t.Fatalf("Peek = %d, %v", len(es), err)
	}
	if err := s.Ack(es); err != nil {
		t.Fatal(err)
	}
	acked := len(es)
	if st := s.Stats(); st.Records != int64(300-acked) || !st.Oldest.Equal(t0.Add(time.Duration(acked)*time.Second)) {
		t.Fatalf("after acking %d: Stats = %+v", acked, st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := open(t, dir, Options{SegmentBytes: 1024})
	// The head segment is read again from its start (the read position is
	// not persisted): at most one segment of records comes back twice.
	got := drain(t, s2, 64)
	first := 0
	if _, err := fmt.Sscanf(got[0], `{"query_id":"q%05d"`, &first); err != nil || first > acked {
		t.Fatalf("first record after reopen %q (acked %d)", got[0], acked)
	}
	for i, g := range got {
		if want := string(payload(first + i)); g != want {
			t.Fatalf("record %d = %q, want %q", i, g, want)
		}
	}
	if first+len(got) != 300 {
		t.Fatalf("read up to %d, want 300", first+len(got))
	}
	if st := s2.Stats(); st.Records != 0 || st.Bytes != 0 || !st.Oldest.IsZero() || st.Corrupt != 0 {
		t.Errorf("drained Stats = %+v", st)
	}
	if segs := segments(t, dir); len(segs) != 0 {
		t.Errorf("segments left after draining: %v", segs)
	}
	// Appends after draining start a new segment.
	if err := s2.Append([]byte("again"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, s2, 10); len(got) != 1 || got[0] != "again" {
		t.Errorf("after drain got %q", got)
	}
}

// TestCorruptRecordSkipped flips one byte in a record in the middle of a
// segment: that record is detected, named (file and offset) in the log,
// counted and skipped; every other record is read.
func TestCorruptRecordSkipped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		harm func(b []byte, at int) []byte
	}{
		{"payload byte", func(b []byte, at int) []byte { b[at+frameHeader+3] ^= 0x40; return b }},
		{"length", func(b []byte, at int) []byte { b[at+5] ^= 0x7f; return b }},
		{"magic", func(b []byte, at int) []byte { b[at] = 'X'; return b }},
		{"torn tail", func(b []byte, at int) []byte { return b[:len(b)-7] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s := open(t, dir, Options{})
			for i := range 50 {
				if err := s.Append(payload(i), time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			segs := segments(t, dir)
			if len(segs) != 1 {
				t.Fatalf("segments %v", segs)
			}
			b, err := os.ReadFile(segs[0])
			if err != nil {
				t.Fatal(err)
			}
			// Find record 20's frame (the last one for the torn tail).
			victim := 20
			if c.name == "torn tail" {
				victim = 49
			}
			at := bytes.Index(b, payload(victim)) - frameHeader
			if err := os.WriteFile(segs[0], c.harm(b, at), 0o600); err != nil {
				t.Fatal(err)
			}

			var logBuf bytes.Buffer // written by Peek, in this goroutine
			s2 := open(t, dir, Options{Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
			got := drain(t, s2, 7)
			if len(got) != 49 {
				t.Fatalf("read %d records, want 49", len(got))
			}
			for _, g := range got {
				if g == string(payload(victim)) {
					t.Fatalf("the corrupt record %d was returned", victim)
				}
			}
			if st := s2.Stats(); st.Corrupt != 1 || st.Records != 0 {
				t.Errorf("Stats = %+v, want 1 corrupt, 0 records", st)
			}
			log := logBuf.String()
			if !strings.Contains(log, "corrupt record skipped") || !strings.Contains(log, filepath.Base(segs[0])) ||
				!strings.Contains(log, fmt.Sprintf("offset=%d", at)) {
				t.Errorf("log does not name the file and offset %d:\n%s", at, log)
			}
		})
	}
}

// TestFull refuses an append past MaxBytes and takes appends again once
// records are acknowledged.
func TestFull(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), Options{MaxBytes: 4096, SegmentBytes: 1024})
	n := 0
	for ; n < 1000; n++ {
		err := s.Append(payload(1), time.Now())
		if errors.Is(err, ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 || n == 1000 {
		t.Fatalf("%d appends before ErrFull", n)
	}
	if st := s.Stats(); st.Bytes > 4096 || st.Records != int64(n) {
		t.Fatalf("Stats = %+v", st)
	}
	if got := drain(t, s, 5); len(got) != n {
		t.Fatalf("drained %d, want %d", len(got), n)
	}
	if err := s.Append(payload(1), time.Now()); err != nil {
		t.Errorf("append after drain: %v", err)
	}
}

// TestConcurrentAppendsWhileReading appends from several goroutines while
// one reader drains: every record is read exactly once.
func TestConcurrentAppendsWhileReading(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), Options{SegmentBytes: 2048, SyncInterval: time.Millisecond})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 250 {
				if err := s.Append(payload(g*1000+i), time.Now()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	seen := map[string]int{}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		got := drain(t, s, 16)
		for _, g := range got {
			seen[g]++
		}
		if finished && len(got) == 0 && s.Stats().Records == 0 {
			break
		}
	}
	if len(seen) != 1000 {
		t.Errorf("read %d distinct records, want 1000", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s read %d times", k, n)
		}
	}
}

// TestOneProcessAtATime refuses a second Open of a directory in use.
func TestOneProcessAtATime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open(t, dir, Options{})
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open = %v, want ErrLocked", err)
	}
}

// BenchmarkAppend is the cost of spooling one record of about 2 KB (the
// size of a finished query's JSON), fsync batched every 100ms.
func BenchmarkAppend(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rec := bytes.Repeat([]byte("x"), 2048)
	b.SetBytes(int64(len(rec)))
	b.ResetTimer()
	for b.Loop() {
		if err := s.Append(rec, time.Now()); err != nil {
			b.Fatal(err)
		}
		if s.Stats().Bytes > 512<<20 {
			b.StopTimer()
			drainBench(b, s)
			b.StartTimer()
		}
	}
}

func drainBench(b *testing.B, s *Spool) {
	for {
		es, err := s.Peek(1024)
		if err != nil {
			b.Fatal(err)
		}
		if len(es) == 0 {
			return
		}
		if err := s.Ack(es); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRecordsLargerThanTheReadWindow reads records larger than Peek's read
// window, and skips a corrupt one among them.
func TestRecordsLargerThanTheReadWindow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir, Options{SegmentBytes: 16 << 20})
	sizes := []int{700 << 10, 3 << 20, 10, 900 << 10, 2 << 20, 5}
	for i, n := range sizes {
		b := bytes.Repeat([]byte{byte('a' + i)}, n)
		if err := s.Append(b, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segments(t, dir)
	b, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte deep inside the fifth record (2 MiB of 'e').
	at := bytes.Index(b, bytes.Repeat([]byte{'e'}, 1024)) + 1<<20
	b[at] = 'x'
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, dir, Options{})
	got := drain(t, s2, 3)
	var lens []int
	for _, g := range got {
		lens = append(lens, len(g))
	}
	if want := []int{700 << 10, 3 << 20, 10, 900 << 10, 5}; fmt.Sprint(lens) != fmt.Sprint(want) {
		t.Errorf("record sizes read %v, want %v", lens, want)
	}
	if st := s2.Stats(); st.Corrupt != 1 {
		t.Errorf("Stats = %+v, want 1 corrupt", st)
	}
}
