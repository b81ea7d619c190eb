// Package sse reads text/event-stream bodies (the WHATWG framing), for
// every reader of one in ragtime: the model clients (OpenAI-compatible and
// Anthropic streams), api.Client (ragtime's own /ask stream), the load
// generator and the measuring tools (bench/peerload, bench/relay,
// scripts/abuseload).
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"time"
)

// MaxLine is the longest line a Reader accepts by default (bufio.Scanner's
// default of 64 KiB is too small for some providers' final chunks).
const MaxLine = 1 << 20

// Reader splits an event stream into events (data lines joined with
// newlines, event names, comments ignored) and hands each to Handle with
// the time its first data line arrived (Clock's reading as the line is
// read: a model client passes the kernel's stamp of the read that brought
// it). Handwritten because the framing is twenty lines and the timing of
// each event must be taken as its line is read. An event without data is
// not handed on.
type Reader struct {
	// Handle is called per event; stop ends the stream successfully.
	Handle func(event string, data []byte, at time.Time) (stop bool, err error)
	// TooLong builds the error for a line over MaxLine (nil:
	// bufio.ErrTooLong).
	TooLong func() error
	// Clock stamps each event (nil: time.Now).
	Clock func() time.Time
	// MaxLine is the longest line accepted (0: MaxLine).
	MaxLine int

	data   []byte
	dataAt time.Time
	event  string
}

var (
	fieldData  = []byte("data")
	fieldEvent = []byte("event")
)

// Run reads body until Handle stops, the body ends or an error. At the
// end of the body, a last event without its blank line still counts, and
// stopped and err are Handle's for it (false, nil when there is none).
func (r *Reader) Run(body io.Reader) (stopped bool, err error) {
	if r.Clock == nil {
		r.Clock = time.Now
	}
	max := r.MaxLine
	if max == 0 {
		max = MaxLine
	}
	sc := NewLineScanner(body, max)
	for sc.Scan() {
		stop, err := r.line(sc.Bytes())
		if err != nil || stop {
			return stop, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) && r.TooLong != nil {
			return false, r.TooLong()
		}
		return false, err
	}
	return r.dispatch()
}

// line handles one line of the event stream (without its line ending).
func (r *Reader) line(l []byte) (bool, error) {
	if len(l) == 0 {
		return r.dispatch()
	}
	if l[0] == ':' {
		return false, nil // comment or keep-alive
	}
	field, value := l, []byte(nil)
	if i := bytes.IndexByte(l, ':'); i >= 0 {
		field, value = l[:i], l[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch {
	case bytes.Equal(field, fieldData):
		if len(r.data) == 0 {
			r.dataAt = r.Clock()
		} else {
			r.data = append(r.data, '\n')
		}
		r.data = append(r.data, value...)
	case bytes.Equal(field, fieldEvent):
		r.event = eventName(value)
	}
	return false, nil
}

// eventName returns the event name as a string, without allocating for the
// names sent with every chunk (Anthropic's, ragtime's token).
func eventName(b []byte) string {
	switch string(b) { // the compiler does not allocate for this conversion
	case "content_block_delta":
		return "content_block_delta"
	case "message":
		return "message"
	case "error":
		return "error"
	case "ping":
		return "ping"
	case "token":
		return "token"
	}
	return string(b)
}

// dispatch hands the event read so far to Handle.
func (r *Reader) dispatch() (bool, error) {
	data, event, at := r.data, r.event, r.dataAt
	r.data, r.event = r.data[:0], ""
	if len(data) == 0 {
		return false, nil
	}
	return r.Handle(event, data, at)
}

// NewLineScanner scans body line by line (without the line ending, as
// bufio.ScanLines), lines up to maxLine bytes. Unlike bufio.ScanLines it
// remembers how far a partial line was searched: a long line that arrives
// a few bytes per read (a slow or hostile upstream) costs linear time, not
// a rescan of the whole line on every read (a 200 KB line in 1-byte reads
// took 1.3 s; 1 MB would take over 30 s of CPU).
func NewLineScanner(body io.Reader, maxLine int) *bufio.Scanner {
	sc := bufio.NewScanner(body)
	// 512 bytes to start: a chunk's line is mostly 100 to 300 bytes, and the buffer
	// lives as long as the stream (a held stream keeps it); it doubles for
	// a longer line.
	sc.Buffer(make([]byte, 0, min(512, maxLine)), maxLine)
	searched := 0 // bytes of the pending line known to hold no '\n'
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data[min(searched, len(data)):], '\n'); i >= 0 {
			i += min(searched, len(data))
			searched = 0
			return i + 1, bytes.TrimSuffix(data[:i], []byte{'\r'}), nil
		}
		if atEOF && len(data) > 0 {
			searched = 0
			return len(data), bytes.TrimSuffix(data, []byte{'\r'}), nil
		}
		searched = len(data)
		return 0, nil, nil
	})
	return sc
}
