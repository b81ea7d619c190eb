package upstream

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfterReadsSecondsAndDates(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for _, c := range []struct {
		header    string
		ok, dated bool
		wait      time.Duration // for seconds
	}{
		{header: "", ok: false},
		{header: "7", ok: true, wait: 7 * time.Second},
		{header: " 0 ", ok: true, wait: 0},
		{header: "1.5", ok: true, wait: 1500 * time.Millisecond},
		{header: "-3", ok: false},
		{header: "1e300", ok: false},
		{header: "soon", ok: false},
		{header: date.Format(http.TimeFormat), ok: true, dated: true},
		{header: date.Format(time.RFC850), ok: true, dated: true},
		{header: "Mon, 01 Jan 2001 00:00:00 GMT", ok: true, dated: true}, // past: wait 0
	} {
		h := http.Header{}
		if c.header != "" {
			h.Set("Retry-After", c.header)
		}
		wait, at, ok := RetryAfter(h)
		if ok != c.ok || !at.IsZero() != c.dated {
			t.Errorf("Retry-After %q: ok %v, at %v; want ok %v, dated %v", c.header, ok, at, c.ok, c.dated)
			continue
		}
		switch {
		case !ok && wait != 0:
			t.Errorf("Retry-After %q: unreadable, yet wait %v", c.header, wait)
		case ok && !c.dated && wait != c.wait:
			t.Errorf("Retry-After %q: wait %v, want %v", c.header, wait, c.wait)
		case c.dated && (wait < 0 || wait > time.Hour || !at.Equal(date) && at.Year() != 2001):
			t.Errorf("Retry-After %q: wait %v, at %v", c.header, wait, at)
		}
	}
}
