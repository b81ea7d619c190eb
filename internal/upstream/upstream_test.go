package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"ragtime"
	"ragtime/internal/upstream/upstreamtest"
)

func sse(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range 3 {
		fmt.Fprintf(w, "data: %d\n\n", i)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func post(t *testing.T, c *Client, url string) (*http.Response, *Trace, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader([]byte(`{"q":1}`)))
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trace{}
	resp, err := c.Do(req, tr)
	return resp, tr, err
}

// TestDoRetriesOnceOnAStaleConnection: a server that closes the connection
// after each stream (no Connection: close) makes every reused connection
// fail before a response byte; each request is sent again on a fresh
// connection and succeeds, and the trace says so.
func TestDoRetriesOnceOnAStaleConnection(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.StartClosing(t, http.HandlerFunc(sse))
	c := NewPool(Options{}).Client(srv.URL)
	fresh := int64(0)
	for i := range 4 {
		resp, tr, err := post(t, c, srv.URL+"/v1/chat/completions")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("request %d: body %q", i, body)
		}
		// The retry's connection is not pooled, so the pooled one alternates
		// between new (request 0, 2) and stale (1, 3).
		if conn := tr.Conn(); conn.FreshRetry != (i%2 == 1) || conn.Reused {
			t.Errorf("request %d: conn %+v, want FreshRetry %v on a new connection", i, conn, i%2 == 1)
		}
		if tr.Conn().FreshRetry {
			fresh++
		}
	}
	if a, d := srv.Answered.Load(), srv.Dropped.Load(); a != 4 || d != fresh {
		t.Errorf("server answered %d and dropped %d, want 4 answered and %d dropped", a, d, fresh)
	}
}

// TestDoDoesNotRetryWhatGotAnAnswer: a fresh connection that fails, and a
// reused one that failed after a response byte, are not sent again.
func TestDoDoesNotRetryWhatGotAnAnswer(t *testing.T) {
	t.Parallel()
	var seen atomic.Int64
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	}))
	defer hangUp.Close()
	if _, _, err := post(t, NewPool(Options{}).Client(hangUp.URL), hangUp.URL); err == nil || seen.Load() != 1 {
		t.Errorf("fresh connection closed: err %v after %d requests, want an error after 1", err, seen.Load())
	}

	var n atomic.Int64
	partial := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			sse(w, r)
			return
		}
		c, buf, _ := w.(http.Hijacker).Hijack()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Ty")
		buf.Flush()
		c.Close()
	}))
	defer partial.Close()
	c := NewPool(Options{}).Client(partial.URL)
	resp, _, err := post(t, c, partial.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, _, err := post(t, c, partial.URL); err == nil || n.Load() != 2 {
		t.Errorf("partial answer: err %v after %d requests, want an error after 2", err, n.Load())
	}
}

// TestDoIdempotentRetriesWhatIsWorthIt: 503 twice then 200 succeeds on the
// third try; a 400 is not retried.
func TestDoIdempotentRetriesWhatIsWorthIt(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		switch {
		case r.URL.Path == "/bad":
			w.WriteHeader(400)
		case n.Add(1) <= 2:
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	c := NewPool(Options{}).Client(srv.URL)
	do := func(path string) (int, int) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+path, strings.NewReader("body"))
		resp, made, err := c.DoIdempotent(req, &Trace{}, 2)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, made
	}
	if status, made := do("/ok"); status != 200 || made != 2 {
		t.Errorf("503, 503, 200: got %d after %d retries", status, made)
	}
	if status, made := do("/bad"); status != 400 || made != 0 {
		t.Errorf("400: got %d after %d retries", status, made)
	}
	for _, b := range bodies {
		if b != "body" {
			t.Errorf("a retry sent body %q", b)
		}
	}
}

// TestPoolSharesOneTransportPerHost: the LLM and the embedder on one server
// draw from one keep-alive pool.
func TestPoolSharesOneTransportPerHost(t *testing.T) {
	t.Parallel()
	p := NewPool(Options{IdlePerHost: 7})
	a, b, c := p.Client("http://127.0.0.1:9/v1"), p.Client("http://127.0.0.1:9/api"), p.Client("http://127.0.0.1:10/v1")
	if a != b || a == c {
		t.Errorf("clients per host: same host %v, other host %v", a == b, a == c)
	}
	if tr := a.pooled.Transport.(*http.Transport); tr.MaxIdleConnsPerHost != 7 || !tr.ForceAttemptHTTP2 {
		t.Errorf("transport idle %d, http2 %v", tr.MaxIdleConnsPerHost, tr.ForceAttemptHTTP2)
	}
}

const testKey = "sk-test-SECRET0123456789abcdef6789"

func TestScrubber(t *testing.T) {
	t.Parallel()
	s := NewScrubber(testKey)
	for _, in := range []string{
		"Incorrect API key provided: " + testKey + ".",
		"key sk-test-SEC**********6789 rejected",
		"header Authorization: Bearer " + testKey,
		"masked abcd****************wxyz and " + testKey[:8] + "…",
		"tail only …" + testKey[len(testKey)-6:],
	} {
		out := s.Scrub(in)
		for _, secret := range []string{testKey, "SECRET", "6789", "SEC*"} {
			if strings.Contains(out, secret) {
				t.Errorf("Scrub(%q) = %q still holds %q", in, out, secret)
			}
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("Scrub(%q) = %q redacted nothing", in, out)
		}
	}
	if got := s.Scrub("plain message about disk-backed tasks"); got != "plain message about disk-backed tasks" {
		t.Errorf("Scrub changed harmless text: %q", got)
	}
	err := s.Wrap(fmt.Errorf("dial: %w with %s", context.Canceled, testKey))
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), testKey) {
		t.Errorf("Wrap: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://user:s3cret@host:8080/v1": "http://user:xxxxx@host:8080/v1",
		"http://host/v1":                  "http://host/v1",
		"http://u:s3cret@ho st/%zz":       "…@ho st/%zz",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		body   string
		want   ragtime.Kind
	}{
		{401, "", ragtime.KindUpstreamAuth}, {403, "", ragtime.KindUpstreamAuth}, {404, "", ragtime.KindUpstreamNotFound},
		{400, `{"error":{"message":"model nope not found"}}`, ragtime.KindUpstreamNotFound},
		{400, `{"error":{"message":"bad","code":"model_not_found"}}`, ragtime.KindUpstreamNotFound},
		{429, "", ragtime.KindRateLimited}, {408, "", ragtime.KindTimeout}, {504, "", ragtime.KindTimeout},
		{500, "", ragtime.KindUpstream}, {503, "overloaded", ragtime.KindUpstream}, {422, "", ragtime.KindUpstreamRejected},
	} {
		if got := Classify(c.status, ParseError([]byte(c.body))); got != c.want {
			t.Errorf("Classify(%d, %s) = %d, want %d", c.status, c.body, got, c.want)
		}
	}
	if ue := ParseError([]byte(`{"detail":"d"}`)); ue.Message != "d" {
		t.Errorf("detail: %+v", ue)
	}
}

func TestReadLimited(t *testing.T) {
	t.Parallel()
	if b, err := ReadLimited(strings.NewReader("12345"), 5); err != nil || string(b) != "12345" {
		t.Errorf("at the limit: %q %v", b, err)
	}
	if b, err := ReadLimited(strings.NewReader("123456"), 5); !errors.Is(err, ErrTooLarge) || string(b) != "12345" {
		t.Errorf("over the limit: %q %v", b, err)
	}
}

// TestReadLimitedSize: a body read with its announced size is read whole
// in one allocation for the bytes; a size announced wrongly (or beyond the
// limit) still reads the body as it is, within the limit.
func TestReadLimitedSize(t *testing.T) { // not parallel: it counts allocations
	body := strings.Repeat("x", 3000)
	for _, size := range []int64{3000, -1, 10, 5000, 1 << 40} {
		b, err := ReadLimitedSize(strings.NewReader(body), 4000, size)
		if err != nil || string(b) != body {
			t.Errorf("size %d: %d bytes, %v", size, len(b), err)
		}
		if b, err := ReadLimitedSize(strings.NewReader(body), 2999, size); !errors.Is(err, ErrTooLarge) || len(b) != 2999 {
			t.Errorf("size %d over the limit: %d bytes, %v", size, len(b), err)
		}
	}
	r := strings.NewReader(body)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(body)
		if _, err := ReadLimitedSize(r, 4000, 3000); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 { // the bytes, and io.LimitReader's reader
		t.Errorf("%v allocations for a body of announced size, want 2", allocs)
	}
	// Into a reused buffer with room: only io.LimitReader's reader.
	buf := make([]byte, 0, 4096)
	allocs = testing.AllocsPerRun(20, func() {
		r.Reset(body)
		b, err := ReadLimitedTo(buf, r, 4000)
		if err != nil || string(b) != body {
			t.Fatalf("ReadLimitedTo: %d bytes, %v", len(b), err)
		}
	})
	if allocs > 1 {
		t.Errorf("%v allocations reading into a buffer with room, want 1", allocs)
	}
}
