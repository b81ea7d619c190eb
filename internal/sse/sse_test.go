package sse

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestReaderFramesEvents(t *testing.T) {
	t.Parallel()
	body := ": keep-alive\r\nevent: meta\r\ndata: {\"a\":1}\r\n\r\n" +
		"data: one\ndata:two\nid: 7\n\n" + // two data lines, the space after the colon optional
		"event: empty\n\n" + // no data: not an event
		"event: token\ndata: last" // no blank line at the end
	var got []string
	n := 0
	r := Reader{
		Clock: func() time.Time { n++; return time.Unix(int64(n), 0) },
		Handle: func(event string, data []byte, at time.Time) (bool, error) {
			got = append(got, fmt.Sprintf("%s|%s|%d", event, data, at.Unix()))
			return false, nil
		},
	}
	stopped, err := r.Run(strings.NewReader(body))
	want := []string{"meta|{\"a\":1}|1", "|one\ntwo|2", "token|last|3"}
	if stopped || err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Run = %v, %v; events %q, want %q", stopped, err, got, want)
	}
}

func TestReaderStopsAndRefusesLongLines(t *testing.T) {
	t.Parallel()
	calls := 0
	r := Reader{Handle: func(string, []byte, time.Time) (bool, error) { calls++; return true, nil }}
	if stopped, err := r.Run(strings.NewReader("data: a\n\ndata: b\n\n")); !stopped || err != nil || calls != 1 {
		t.Fatalf("a Handle that stops: Run = %v, %v after %d events, want true, nil after 1", stopped, err, calls)
	}
	long := "data: " + strings.Repeat("x", 100) + "\n\n"
	r = Reader{MaxLine: 64, Handle: func(string, []byte, time.Time) (bool, error) { return false, nil }}
	if _, err := r.Run(strings.NewReader(long)); !errors.Is(err, bufio.ErrTooLong) {
		t.Fatalf("a 106-byte line over MaxLine 64: %v, want bufio.ErrTooLong", err)
	}
	mine := errors.New("line too long for this stream")
	r.TooLong = func() error { return mine }
	if _, err := r.Run(strings.NewReader(long)); err != mine {
		t.Fatalf("with TooLong: %v, want its error", err)
	}
}
