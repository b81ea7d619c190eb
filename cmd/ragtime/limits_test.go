package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/llm/sim"
	"ragtime/pipeline"
)

// The limits that keep one client from hurting the rest, end to end: a real
// serve, a real Postgres, llmsim as the model, real sockets (from distinct
// loopback addresses where a test needs distinct callers).

// wireEvent is one SSE block as sent: its id, name and data, or a comment.
type wireEvent struct {
	ID, Name, Comment string
	Data              json.RawMessage
}

// wireReader parses an SSE stream keeping ids and comments.
type wireReader struct{ sc *bufio.Scanner }

func newWireReader(r io.Reader) *wireReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &wireReader{sc: sc}
}

// next returns the next event or comment; ok is false at the end.
func (w *wireReader) next() (e wireEvent, ok bool) {
	for w.sc.Scan() {
		line := w.sc.Text()
		switch {
		case line == "":
			if e.Name != "" || e.Comment != "" {
				return e, true
			}
		case strings.HasPrefix(line, ":"):
			e.Comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			e.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			e.Name = line[7:]
		case strings.HasPrefix(line, "data: "):
			e.Data = json.RawMessage(line[6:])
		}
	}
	return e, false
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip, so that serve sees it as its own caller.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// getJSONError sends GET url and returns the status, the Retry-After header
// and the error code of the answer.
func getJSONError(t *testing.T, c *http.Client, url string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e apiErr
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, resp.Header.Get("Retry-After"), e.Error.Code
}

// openStream starts GET /ask and reads it until its first token.
func openStream(t *testing.T, c *http.Client, url string) (*http.Response, *wireReader, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	r := newWireReader(resp.Body)
	var qid string
	for {
		e, ok := r.next()
		if !ok {
			t.Fatal("the stream ended before its first token")
		}
		if e.Name == "meta" {
			var m pipeline.Meta
			_ = json.Unmarshal(e.Data, &m)
			qid = m.QueryID
		}
		if e.Name == "token" {
			return resp, r, qid
		}
	}
}

// simServe starts llmsim (shaped by mod) and a serve on a fresh database
// and ingested corpus that asks it, with extra serve flags.
func simServe(t *testing.T, mod func(*sim.Config), flags ...string) (*server, *sim.Server, *pgxpool.Pool) {
	t.Helper()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	s, simURL := startSim(t, mod)
	args := append([]string{"--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "m"}, flags...)
	return startServe(t, env, args...), s, pool
}

func TestAdmissionRefusesWith429And503AndRetryAfter(t *testing.T) {
	srv, _, pool := simServe(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 50, 400 }, "--max-concurrent", "1", "--max-concurrent-per-caller", "1", "--queue-timeout", "100ms")
	url := srv.url + "/ask?q=prefill&max_tokens=400"

	a := clientFrom("127.0.0.1")
	openStream(t, a, url) // holds the caller's one stream and the server's one
	status, retry, code := getJSONError(t, a, url)
	if status != http.StatusTooManyRequests || code != "too_many_streams" || retry == "" {
		t.Errorf("the same caller's second stream: %d %q Retry-After %q; want 429 too_many_streams with Retry-After", status, code, retry)
	}
	status, retry, code = getJSONError(t, clientFrom("127.0.0.2"), url)
	if status != http.StatusServiceUnavailable || code != "server_busy" || retry == "" {
		t.Errorf("another caller on a full server: %d %q Retry-After %q; want 503 server_busy with Retry-After", status, code, retry)
	}
	// Refused asks leave no row, and never reached the model.
	time.Sleep(300 * time.Millisecond)
	if n := countRows(t, pool, "queries"); n != 0 {
		t.Errorf("%d rows while only the open stream was admitted", n)
	}
	// Both refusals are counted by reason, and the open stream is running.
	resp, err := http.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ragtime_admission_rejected_total{reason="too_many_streams"} 1`,
		`ragtime_admission_rejected_total{reason="server_busy"} 1`, `ragtime_streams_running 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestRateLimitPerCaller(t *testing.T) {
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir, "--rate", "6/min") // a burst of 1
	a := clientFrom("127.0.0.1")
	ask(t, srv.url, "q=prefill")
	status, retry, code := getJSONError(t, a, srv.url+"/ask?q=prefill")
	if status != http.StatusTooManyRequests || code != "rate_limited" {
		t.Fatalf("second ask within the minute: %d %q; want 429 rate_limited", status, code)
	}
	if s, err := strconv.Atoi(retry); err != nil || s < 1 || s > 10 {
		t.Errorf("Retry-After %q, want 1–10 s at 6/min", retry)
	}
	// Another address is another caller with its own bucket.
	resp, err := clientFrom("127.0.0.2").Get(srv.url + "/ask?q=prefill")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("another caller: %d", resp.StatusCode)
	}
}

func TestQueuedAskWaitsInTheQueueStage(t *testing.T) {
	srv, _, _ := simServe(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 20, 15 }, "--max-concurrent-per-caller", "1", "--queue-timeout", "20s")
	// The two asks run as parallel subtests, not bare goroutines: ask fails
	// with t.Fatal, which on a goroutine of the test's own would end it
	// without a result and leave the test waiting for one until its timeout.
	var got [2]doneEvent
	t.Run("asks", func(t *testing.T) {
		for i := range got {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				for _, e := range ask(t, srv.url, "q=prefill") {
					if e.Name == "done" {
						_ = json.Unmarshal(e.Data, &got[i])
					}
				}
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	first, second := got[0], got[1]
	waited := max(first.QueueMs, second.QueueMs)
	if waited < 100 {
		t.Fatalf("queue_ms %v and %v: one ask must have waited for the other's ~300 ms stream", first.QueueMs, second.QueueMs)
	}
	for _, d := range []doneEvent{first, second} {
		// The accept stage (arrival to the queue's start) comes first.
		if d.Stages[0].Name != ragtime.StageAccept || d.Stages[1].Name != ragtime.StageQueue || d.Stages[1].Attrs["caller_limit"] != float64(1) {
			t.Errorf("accept and queue stages %+v %+v", d.Stages[0], d.Stages[1])
		}
		if d.TTFTMs < d.QueueMs {
			t.Errorf("ttft_ms %v does not hold queue_ms %v", d.TTFTMs, d.QueueMs)
		}
	}
}

func TestReconnectAfterDoneIs204AndOneRow(t *testing.T) {
	srv, s, pool := simServe(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 1, 10 })
	url := srv.url + "/ask?q=prefill"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	r := newWireReader(resp.Body)
	var last wireEvent
	for e, ok := r.next(); ok; e, ok = r.next() {
		last = e
	}
	resp.Body.Close()
	if last.Name != "done" || last.ID == "" {
		t.Fatalf("last event %+v, want done with an id", last)
	}
	// What an EventSource left open does: reconnect with the last id.
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(method, url, strings.NewReader(`{"question":"prefill"}`))
		req.Header.Set("Last-Event-ID", last.ID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || len(b) != 0 {
			t.Errorf("%s reconnect after done: %d %q, want 204 and no body", method, resp.StatusCode, b)
		}
	}
	eventually(t, "the query's row", func() bool { return countRows(t, pool, "queries") >= 1 })
	time.Sleep(200 * time.Millisecond)
	if n := countRows(t, pool, "queries"); n != 1 {
		t.Errorf("%d rows, want exactly 1", n)
	}
	if n := s.Stats().Requests; n != 1 {
		t.Errorf("the model was asked %d times, want once", n)
	}
	// An id this server never sent is refused, not asked.
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Last-Event-ID", "garbage")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("Last-Event-ID garbage: %v %v, want 400", resp.StatusCode, err)
	}
}

func TestResumeMidStreamFromTheNextEvent(t *testing.T) {
	srv, s, pool := simServe(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 20, 60 }, "--sse-retry", "2s")
	url := srv.url + "/ask?q=prefill&max_tokens=60"

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := newWireReader(resp.Body)
	var text strings.Builder
	var lastID, qid string
	tokens := 0
	for e, ok := r.next(); ok && tokens < 5; e, ok = r.next() {
		if e.Name == "" {
			continue
		}
		lastID = e.ID
		if e.Name == "meta" {
			var m pipeline.Meta
			_ = json.Unmarshal(e.Data, &m)
			qid = m.QueryID
		}
		if e.Name == "token" {
			var d struct{ Text string }
			_ = json.Unmarshal(e.Data, &d)
			text.WriteString(d.Text)
			tokens++
		}
	}
	cancel() // the connection drops mid-answer
	resp.Body.Close()

	req, _ = http.NewRequest("GET", url, nil)
	req.Header.Set("Last-Event-ID", lastID)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	_, lastSeq, _ := strings.Cut(lastID, ":")
	n, _ := strconv.Atoi(lastSeq)
	r = newWireReader(resp.Body)
	want := fmt.Sprintf("%s:%d", qid, n+1)
	var first, done wireEvent
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.Name == "" {
			continue
		}
		if first.ID == "" {
			first = e
		}
		if e.Name == "token" {
			var d struct{ Text string }
			_ = json.Unmarshal(e.Data, &d)
			text.WriteString(d.Text)
		}
		done = e
	}
	if first.ID != want {
		t.Fatalf("the resumed stream starts at %q, want %q (the event after Last-Event-ID)", first.ID, want)
	}
	if done.Name != "done" {
		t.Fatalf("the resumed stream ends with %q", done.Name)
	}
	var d doneEvent
	_ = json.Unmarshal(done.Data, &d)
	if got := len(strings.Fields(text.String())); got != d.Usage.CompletionTokens {
		t.Errorf("%d words across both connections, want the %d tokens of one answer, none lost or repeated", got, d.Usage.CompletionTokens)
	}
	if n := s.Stats().Requests; n != 1 {
		t.Errorf("the model was asked %d times, want once", n)
	}
	eventually(t, "one ok row", func() bool {
		var status string
		err := pool.QueryRow(context.Background(), "SELECT status FROM queries WHERE id = $1", qid).Scan(&status)
		return err == nil && status == "ok"
	})
	if n := countRows(t, pool, "queries"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

// dialSmallWindow connects from a socket with a tiny receive buffer, so
// that a reader that stops reading stalls the server's writes quickly.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestStalledReaderIsCutAndUpstreamCancelled(t *testing.T) {
	srv, s, pool := simServe(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 1, 4096 }, "--stream-write-timeout", "300ms", "--max-question-chars", "20000")
	conn := dialSmallWindow(t, strings.TrimPrefix(srv.url, "http://"))
	// llmsim streams the words of the prompt's user message: with no
	// sources (no such document) and a question that is one 19,000-letter
	// word, the answer runs to ~10 MB, more than the kernel buffers of a
	// loopback connection hold (up to 4 MB of send buffer).
	q := strings.Repeat("x", 19000)
	fmt.Fprintf(conn, "GET /ask?q=%s&doc_id=none.md&max_tokens=4096 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", q)
	// Read the first bytes (the stream started), then stop reading.
	if _, err := conn.Read(make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "llmsim to observe the cancellation", func() bool { return s.Stats().Cancelled == 1 })
	if st := s.Stats(); st.Completed != 0 {
		t.Errorf("llmsim completed %d answers; the stalled one must be cut", st.Completed)
	}
	eventually(t, "the cut query's row", func() bool {
		var status, code string
		err := pool.QueryRow(context.Background(), "SELECT status, coalesce(error_code, '') FROM queries").Scan(&status, &code)
		return err == nil && status == "cancelled" && code == "client_stalled"
	})
}

func TestSlowBodyIsCut(t *testing.T) {
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir, "--body-timeout", "300ms")
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"question": "what is prefill?"}`
	fmt.Fprintf(conn, "POST /ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	// One byte every 100 ms: the whole body would take 3 s.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := range len(body) {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	var e apiErr
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusRequestTimeout || e.Error.Code != "body_timeout" {
		t.Errorf("slow body: %d %q, want 408 body_timeout", resp.StatusCode, e.Error.Code)
	}
	if n := countRows(t, pool, "queries"); n != 0 {
		t.Errorf("%d rows for a body that never arrived", n)
	}
}

// TestShutdownSendsServerShutdown: a stream still open when
// --shutdown-timeout passes is ended with an error event server_shutdown,
// and its query is stored as cancelled with that code before serve returns
// (the recorder must not close under it).
func TestShutdownSendsServerShutdown(t *testing.T) {
	srv, _, pool := simServe(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 50, 400 }, "--shutdown-timeout", "100ms")
	_, r, qid := openStream(t, http.DefaultClient, srv.url+"/ask?q=prefill&max_tokens=400")
	if err := srv.stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	var last wireEvent
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.Name != "" {
			last = e
		}
	}
	var perr ragtime.Error
	_ = json.Unmarshal(last.Data, &perr)
	if last.Name != "error" || perr.Code != "server_shutdown" || perr.Hint == "" {
		t.Fatalf("last event %s %s, want error server_shutdown with a hint", last.Name, last.Data)
	}
	var status, code string
	if err := pool.QueryRow(context.Background(), "SELECT status, error_code FROM queries WHERE id = $1", qid).Scan(&status, &code); err != nil {
		t.Fatalf("the query cut at shutdown was not stored: %v", err)
	}
	if status != "cancelled" || code != "server_shutdown" {
		t.Errorf("row %s/%s, want cancelled/server_shutdown", status, code)
	}
}

// TestHeartbeatDuringLongPrefill: keep-alive comments every --sse-heartbeat
// while the model prefills, and none counted as tokens. The beat is 50 ms
// for a 1 s prefill and the test wants 5 of the ~19: on a loaded machine
// timers fire late (at 100 ms it once saw fewer than 5 of ~9).
func TestHeartbeatDuringLongPrefill(t *testing.T) {
	srv, _, _ := simServe(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 1000, 1, 8 }, "--sse-heartbeat", "50ms")
	resp, err := http.Get(srv.url + "/ask?q=prefill")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := newWireReader(resp.Body)
	var seq []string
	var done doneEvent
	tokens := 0
	for e, ok := r.next(); ok; e, ok = r.next() {
		switch {
		case e.Comment != "":
			if e.Comment != "keep-alive" || e.ID != "" || e.Name != "" {
				t.Errorf("heartbeat %+v, want a bare ': keep-alive' comment", e)
			}
			seq = append(seq, "beat")
		case e.Name == "token":
			tokens++
			seq = append(seq, "token")
		case e.Name == "done":
			_ = json.Unmarshal(e.Data, &done)
			seq = append(seq, e.Name)
		default:
			seq = append(seq, e.Name)
		}
	}
	all := strings.Join(seq, " ")
	_, afterSources, _ := strings.Cut(all, "sources")
	beforeToken, _, _ := strings.Cut(afterSources, "token")
	if n := strings.Count(beforeToken, "beat"); n < 5 {
		t.Errorf("%d heartbeats during a 1 s prefill with --sse-heartbeat 50ms, want at least 5: %s", n, all)
	}
	if tokens != done.Usage.CompletionTokens || tokens != 8 {
		t.Errorf("%d token events, completion_tokens %d, want 8 of each: heartbeats are not tokens", tokens, done.Usage.CompletionTokens)
	}
	// From llm_connect's start to the first token, not llm_prefill alone:
	// that starts at the request-written hook, which can run after the
	// simulator began its prefill (TestAskEndToEndAgainstLLMSim).
	if toFirst := connectToFirstTokenMs(done.Stages); done.TTFTMs < 1000 || toFirst < 1000-0.002 {
		t.Errorf("ttft_ms %v, llm_connect's start to the first token %v ms: TTFT is the first token's, after the 1 s prefill", done.TTFTMs, toFirst)
	}
}

// TestLimitsFollowTheKey: with API keys, a caller is its key, limited by the
// key's own --rate and --concurrency (or, when it has none, serve's) whatever
// address it comes from; another key from the same address is another
// caller.
func TestLimitsFollowTheKey(t *testing.T) {
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	_, simURL := startSim(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 50, 400 })
	slow := createKey(t, env, "--name", "slow", "--scopes", "ask", "--rate", "6/min") // a burst of 1
	narrow := createKey(t, env, "--name", "narrow", "--scopes", "ask", "--concurrency", "1", "--rate", "100/min")
	free := createKey(t, env, "--name", "free", "--scopes", "ask", "--rate", "100/min")
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL,
		"--llm-model", "m", "--queue-timeout", "100ms", "--rate", "1/hour")
	short := srv.url + "/ask?q=prefill&max_tokens=2"

	if status, _, body := call(t, "GET", short, slow.token, nil, nil); status != http.StatusOK {
		t.Fatalf("slow key's first ask: %d %s", status, body)
	}
	status, h, body := call(t, "GET", short, slow.token, nil, nil)
	var e hintedErr
	_ = json.Unmarshal(body, &e)
	if status != http.StatusTooManyRequests || e.Error.Code != "rate_limited" || h.Get("Retry-After") == "" {
		t.Errorf("slow key's second ask: %d %s Retry-After %q; want 429 rate_limited", status, body, h.Get("Retry-After"))
	}

	// The narrow key holds its one stream; its second waits 100 ms, then 429.
	req, _ := http.NewRequest("GET", srv.url+"/ask?q=prefill&max_tokens=400", nil)
	req.Header.Set("Authorization", "Bearer "+narrow.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	newWireReader(resp.Body).next()
	status, _, body = call(t, "GET", short, narrow.token, nil, nil)
	_ = json.Unmarshal(body, &e)
	if status != http.StatusTooManyRequests || e.Error.Code != "too_many_streams" {
		t.Errorf("narrow key's second stream: %d %s; want 429 too_many_streams", status, body)
	}

	// Same address, another key with a rate of its own: the server's --rate
	// (1/hour) is only the default of keys without one, and of keyless
	// callers.
	for i := range 3 {
		if status, _, body := call(t, "GET", short, free.token, nil, nil); status != http.StatusOK {
			t.Fatalf("free key's ask %d: %d %s", i, status, body)
		}
	}
}

func TestIdleKeepAliveConnectionsAreClosed(t *testing.T) {
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", ingestCorpus(t, env), "--idle-timeout", "200ms")
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// The connection is kept alive, then closed by the server once idle.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("reading an idle keep-alive connection: %v, want EOF (closed by the server)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %v, want about --idle-timeout 200ms", d)
	}
}
