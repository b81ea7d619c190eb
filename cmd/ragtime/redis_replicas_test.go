package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"ragtime"
	"ragtime/llm/sim"
	"ragtime/postgres/postgrestest"
	"ragtime/redisstate/redistest"
)

// replicaSet is n real `ragtime serve` processes on one Postgres, one data
// dir (the first writes, the others follow read-only), one llmsim and one
// Redis under a key prefix of the test's own.
type replicaSet struct {
	reps   []*child
	sim    *sim.Server
	dbURL  string
	db     *pgxpool.Pool
	prefix string
}

// startReplicas starts them; setup (when not nil) runs first, on the
// database's environment (to create keys the replicas start with).
func startReplicas(t *testing.T, n int, mod func(*sim.Config), redisURL string, setup func(env map[string]string), flags ...string) *replicaSet {
	t.Helper()
	dbURL, db := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	if setup != nil {
		setup(env)
	}
	dataDir := ingestCorpus(t, env)
	s, simURL := startSim(t, mod)
	rs := &replicaSet{sim: s, dbURL: dbURL, db: db, prefix: redistest.Prefix(t, redistest.URL(t))}
	return rs.start(t, n, dataDir, simURL, redisURL, flags...)
}

func (rs *replicaSet) start(t *testing.T, n int, dataDir, simURL, redisURL string, flags ...string) *replicaSet {
	t.Helper()
	bin := ragtimeBinary(t)
	for i := range n {
		args := append([]string{"--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "m",
			"--redis-url", redisURL, "--redis-prefix", rs.prefix}, flags...)
		if i > 0 {
			args = append(args, "--read-only", "--spool-dir", t.TempDir())
		}
		rs.reps = append(rs.reps, startChild(t, bin, rs.dbURL, args...))
	}
	return rs
}

// roundRobin hands out the replicas' URLs in turn, as a load balancer.
type roundRobin struct {
	mu   sync.Mutex
	next int
	urls []string
}

func (rr *roundRobin) url() string {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	u := rr.urls[rr.next%len(rr.urls)]
	rr.next++
	return u
}

func (rs *replicaSet) roundRobin() *roundRobin {
	rr := &roundRobin{}
	for _, r := range rs.reps {
		rr.urls = append(rr.urls, r.url)
	}
	return rr
}

// askStatus sends GET /ask with a bearer token, reads the answer to its
// end and returns the status and the error code (or "done" for a stream
// that ended with its done event).
func askStatus(client *http.Client, base, token, query string) (int, string) {
	status, code, _ := askLast(client, base, token, query)
	return status, code
}

// askLast is askStatus that also returns the last event's data.
func askLast(client *http.Client, base, token, query string) (int, string, json.RawMessage) {
	req, _ := http.NewRequest("GET", base+"/ask?"+query, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e apiErr
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error.Code, nil
	}
	r := newWireReader(resp.Body)
	var last wireEvent
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.Name != "" {
			last = e
		}
	}
	return resp.StatusCode, last.Name, last.Data
}

// TestReplicasShareLimitsThroughRedis runs three replicas behind a
// round-robin client: a key limited to 60/min (a burst of ten) gets ten
// plus one a second in total, not three times that, and a key with
// --concurrency 4 holds at most four streams across the three.
func TestReplicasShareLimitsThroughRedis(t *testing.T) {
	t.Parallel()
	redisURL := redistest.URL(t)
	var rated, bounded createdKey
	rs := startReplicas(t, 3, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 2, 10, 300 }, redisURL, func(env map[string]string) {
		rated = createKey(t, env, "--name", "rated", "--scopes", "ask", "--rate", "60/min")
		bounded = createKey(t, env, "--name", "bounded", "--scopes", "ask", "--concurrency", "4")
	}, "--rate", "0", "--max-concurrent-per-caller", "0", "--queue-timeout", "300ms")
	rr := rs.roundRobin()
	client := &http.Client{Timeout: 30 * time.Second}
	if s, code := askStatus(client, rr.urls[0], "", "q=prefill"); s != http.StatusUnauthorized {
		t.Fatalf("an ask without a key: %d %s, want 401 (the replicas start with the keys)", s, code)
	}

	// Rate: four callers at once for three seconds.
	var mu sync.Mutex
	counts := map[string]int{}
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 3*time.Second {
				status, code := askStatus(client, rr.url(), rated.token, "q=prefill&max_tokens=1")
				mu.Lock()
				counts[fmt.Sprintf("%d %s", status, code)]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	allowed := counts["200 done"]
	if counts["429 rate_limited"] == 0 || allowed+counts["429 rate_limited"] != sumCounts(counts) {
		t.Fatalf("answers %v: want only 200 done and 429 rate_limited", counts)
	}
	// Ten at once, then one a second (60/min), shared by the three.
	if most := 10 + int(elapsed) + 2; allowed < 10 || allowed > most {
		t.Errorf("the 60/min key got %d asks through three replicas in %.1f s (%v), want 10 to %d", allowed, elapsed, counts, most)
	}

	// Concurrency: nine streams at once, round robin; four stream, the
	// others wait out --queue-timeout and get 429 too_many_streams.
	counts = map[string]int{}
	for range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, code := askStatus(client, rr.url(), bounded.token, "q=prefill&max_tokens=300")
			mu.Lock()
			counts[fmt.Sprintf("%d %s", status, code)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts["200 done"] != 4 || counts["429 too_many_streams"] != 5 {
		t.Errorf("nine streams of a key with --concurrency 4 over three replicas: %v, want 4 done and 5 too_many_streams", counts)
	}
	// The queue stage shows the shared state's round trip: one for an ask
	// that finds a lease free. The streams' leases are given back in the
	// background (riding a later script, or alone within 100 ms), so an ask
	// right after them may still poll for one: ask until one finds a lease
	// free, for up to 5 s.
	var queue ragtime.Span
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, name, data := askLast(client, rr.url(), bounded.token, "q=prefill&max_tokens=1")
		if name != "done" {
			t.Fatalf("an ask after the streams ended: %s %s", name, data)
		}
		var d doneEvent
		_ = json.Unmarshal(data, &d)
		queue = d.Stages[1]
		if queue.Attrs["redis_calls"] == float64(1) || time.Now().After(deadline) {
			break
		}
	}
	if queue.Name != "queue" || queue.Attrs["redis_calls"] != float64(1) || queue.Attrs["redis_ms"] == nil {
		t.Errorf("queue stage %+v, want redis_ms and redis_calls 1", queue)
	}
	if t.Failed() {
		for i, r := range rs.reps {
			t.Logf("replica %d:\n%s", i, r.stderr.String())
		}
	}
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestResumeOnAnotherReplica cuts a stream mid-answer on one replica and
// resumes it with Last-Event-ID on another, for GET and POST /ask: every
// event after the last one received comes exactly once, in order, to the
// done event; the model is asked once and one query is stored per ask; the
// replica running the query keeps it running past its grace (twice
// --sse-retry) while the client follows it elsewhere; a reconnect after the
// end is answered 204 on either replica.
func TestResumeOnAnotherReplica(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t, 2, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 20, 150 }, redistest.URL(t), nil,
		"--sse-retry", "500ms")
	a, b := rs.reps[0].url, rs.reps[1].url
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			newReq := func(ctx context.Context, base string) *http.Request {
				if method == "GET" {
					req, _ := http.NewRequestWithContext(ctx, "GET", base+"/ask?q=prefill&max_tokens=150", nil)
					return req
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/ask", strings.NewReader(`{"question":"prefill","max_tokens":150}`))
				req.Header.Set("Content-Type", "application/json")
				return req
			}
			ctx, cancel := context.WithCancel(context.Background())
			resp, err := http.DefaultClient.Do(newReq(ctx, a))
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			var ids []string
			tokens := 0
			r := newWireReader(resp.Body)
			for e, ok := r.next(); ok && tokens < 5; e, ok = r.next() {
				if e.Name == "" {
					continue
				}
				ids = append(ids, e.ID)
				if e.Name == "token" {
					text.WriteString(tokenText(t, e.Data))
					tokens++
				}
			}
			cancel() // the connection to A drops mid-answer
			resp.Body.Close()
			time.Sleep(500 * time.Millisecond) // an EventSource waits the stream's retry: before reconnecting

			req := newReq(context.Background(), b)
			req.Header.Set("Last-Event-ID", ids[len(ids)-1])
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("resume on the other replica: %d", resp.StatusCode)
			}
			var last wireEvent
			r = newWireReader(resp.Body)
			for e, ok := r.next(); ok; e, ok = r.next() {
				if e.Name == "" {
					continue
				}
				ids = append(ids, e.ID)
				if e.Name == "token" {
					text.WriteString(tokenText(t, e.Data))
				}
				last = e
			}
			if last.Name != "done" {
				t.Fatalf("the resumed stream ends with %s %s\nA:\n%s", last.Name, last.Data, rs.reps[0].stderr.String())
			}
			qid, _, _ := strings.Cut(ids[0], ":")
			for i, id := range ids {
				if want := fmt.Sprintf("%s:%d", qid, i); id != want {
					t.Fatalf("event %d across both connections has id %s, want %s (each event once, in order)", i, id, want)
				}
			}
			var d doneEvent
			_ = json.Unmarshal(last.Data, &d)
			if got := len(strings.Fields(text.String())); got != d.Usage.CompletionTokens || got != 150 {
				t.Errorf("%d words across both connections, want the %d tokens of one answer (150), none lost or repeated", got, d.Usage.CompletionTokens)
			}
			for _, base := range []string{a, b} {
				req := newReq(context.Background(), base)
				req.Header.Set("Last-Event-ID", last.ID)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					t.Errorf("reconnect after done on %s: %d, want 204", base, resp.StatusCode)
				}
			}
		})
	}
	if n := rs.sim.Stats().Requests; n != 2 {
		t.Errorf("the model was asked %d times for two asks, want 2", n)
	}
	db := rs.db
	eventually(t, "the two queries stored", func() bool { return countRows(t, db, "queries") >= 2 })
	time.Sleep(300 * time.Millisecond)
	var n, ok int
	if err := db.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM queries`).Scan(&n, &ok); err != nil {
		t.Fatal(err)
	}
	if n != 2 || ok != 2 {
		t.Errorf("%d stored queries (%d ok), want 2, both ok", n, ok)
	}
}

func tokenText(t *testing.T, data json.RawMessage) string {
	t.Helper()
	var d struct{ Text string }
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("token %s: %v", data, err)
	}
	return d.Text
}

// TestRedisCutMidRun cuts two replicas from Redis (a TCP proxy between them
// and the one Redis, closed; the Redis itself keeps running) while asks
// keep coming: none fails; the limits fall back to each replica's own,
// counted in ragtime_redis_fallbacks_total and said once in the log; a
// resume on the replica running the query still works (its local buffer);
// and when Redis is back the replicas say so and share again.
func TestRedisCutMidRun(t *testing.T) {
	t.Parallel()
	redisURL := redistest.URL(t)
	proxy := postgrestest.NewProxy(t, strings.TrimPrefix(redisURL[:strings.LastIndex(redisURL, "/")], "redis://"))
	rs := startReplicas(t, 2, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 2, 5, 400 }, proxy.URL(redisURL), nil,
		"--rate", "6000/min", "--max-concurrent-per-caller", "16", "--sse-retry", "500ms")
	rr := rs.roundRobin()
	client := &http.Client{Timeout: 30 * time.Second}

	var mu sync.Mutex
	counts := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				status, code := askStatus(client, rr.url(), "", "q=prefill&max_tokens=10")
				mu.Lock()
				counts[fmt.Sprintf("%d %s", status, code)]++
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	proxy.Cut()
	// While Redis is away: a stream cut and resumed on its own replica.
	a := rs.reps[0].url
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", a+"/ask?q=prefill&max_tokens=100", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var lastID string
	r := newWireReader(resp.Body)
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.Name == "token" {
			lastID = e.ID
			break
		}
	}
	cancel()
	resp.Body.Close()
	req, _ = http.NewRequest("GET", a+"/ask?q=prefill&max_tokens=100", nil)
	req.Header.Set("Last-Event-ID", lastID)
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	var last wireEvent
	r = newWireReader(resp.Body)
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.Name != "" {
			last = e
		}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || last.Name != "done" {
		t.Errorf("a resume on the replica running the query while Redis is away: %d, last event %s", resp.StatusCode, last.Name)
	}
	time.Sleep(time.Second)
	proxy.Restore()
	for _, c := range rs.reps {
		eventually(t, "each replica says Redis answers again", func() bool {
			return strings.Contains(c.stderr.String(), "Redis answers again")
		})
	}
	close(stop)
	wg.Wait()
	if counts["200 done"] == 0 || counts["200 done"] != sumCounts(counts) {
		t.Errorf("asks while Redis was cut: %v, want every one done", counts)
	}
	for i, c := range rs.reps {
		if n := strings.Count(c.stderr.String(), "Redis is unavailable"); n != 1 {
			t.Errorf("replica %d said Redis is unavailable %d times, want once per outage", i, n)
		}
		_, _, body := call(t, "GET", c.url+"/metrics", "", nil, nil)
		if !regexp.MustCompile(`ragtime_redis_fallbacks_total\{concern="rate"\} [1-9]`).Match(body) {
			t.Errorf("replica %d's metrics lack rate fallbacks:\n%s", i, grepLines(string(body), "ragtime_redis"))
		}
	}
	// Shared again: an ask's bucket is in Redis. A call that was in flight
	// on a connection the cut broke can fail after "answers again" and
	// open the breaker once more (for redisstate.Options.BreakFor), so the asks go
	// on until one is counted in Redis.
	opts, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	rdb.Del(context.Background(), rs.prefix+"rate:ip:127.0.0.1")
	eventually(t, "an ask after Redis came back counted in Redis", func() bool {
		if _, lastName := askStatus(client, rs.reps[1].url, "", "q=prefill&max_tokens=1"); lastName != "done" {
			t.Errorf("an ask after Redis came back: %s", lastName)
		}
		n, err := rdb.Exists(context.Background(), rs.prefix+"rate:ip:127.0.0.1").Result()
		return err == nil && n == 1
	})
	// And resumes cross replicas again: a stream cut on one is finished
	// on the other, every event once.
	ids, last := cutAndResumeElsewhere(t, client, rs.reps[0].url, rs.reps[1].url, "q=prefill&max_tokens=400")
	if last.Name != "done" {
		t.Fatalf("a resume on the other replica after Redis came back ends with %s %s", last.Name, last.Data)
	}
	qid, _, _ := strings.Cut(ids[0], ":")
	for i, id := range ids {
		if want := fmt.Sprintf("%s:%d", qid, i); id != want {
			t.Fatalf("event %d across both replicas after Redis came back has id %s, want %s", i, id, want)
		}
	}
}

// cutAndResumeElsewhere asks GET /ask?query on from, drops the connection
// after the first token and resumes with Last-Event-ID on to; it returns
// every event's id across both connections and the last event.
func cutAndResumeElsewhere(t *testing.T, client *http.Client, from, to, query string) ([]string, wireEvent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", from+"/ask?"+query, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	r := newWireReader(resp.Body)
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.Name == "" {
			continue
		}
		ids = append(ids, e.ID)
		if e.Name == "token" {
			break
		}
	}
	cancel()
	resp.Body.Close()
	time.Sleep(300 * time.Millisecond) // the first replica sees its client gone and publishes
	req, _ = http.NewRequest("GET", to+"/ask?"+query, nil)
	req.Header.Set("Last-Event-ID", ids[len(ids)-1])
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the resume on %s: %d", to, resp.StatusCode)
	}
	var last wireEvent
	r = newWireReader(resp.Body)
	for e, ok := r.next(); ok; e, ok = r.next() {
		if e.Name != "" {
			ids = append(ids, e.ID)
			last = e
		}
	}
	return ids, last
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// chatFrame is one frame of a chat completion stream: its id (a resumable
// stream's) and its data line.
type chatFrame struct{ ID, Data string }

// readChatFrames calls each with every frame of a chat completion stream
// that has a data line, until each returns false or the stream ends; it
// returns every line read, for what the stream looks like on the wire.
func readChatFrames(r io.Reader, each func(chatFrame) bool) []string {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var lines []string
	var f chatFrame
	for sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		switch {
		case line == "":
			if f.Data != "" && !each(f) {
				return lines
			}
			f = chatFrame{}
		case strings.HasPrefix(line, "id: "):
			f.ID = line[4:]
		case strings.HasPrefix(line, "data: "):
			f.Data = line[6:]
		}
	}
	return lines
}

// TestChatResumeOnAnotherReplica cuts a resumable chat completion stream
// ("ragtime": {"resumable": true}) on one replica mid-answer and resumes it
// on the other with Last-Event-ID: every chunk once, in order, every token
// of the one answer once, one model request and one stored query; a
// reconnect after [DONE] gets 204 on either. A stock request (not opted
// in) on the same replicas streams as before: no ids, no retry hint.
func TestChatResumeOnAnotherReplica(t *testing.T) {
	t.Parallel()
	rs := startReplicas(t, 2, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 20, 150 }, redistest.URL(t), nil,
		"--sse-retry", "500ms")
	a, b := rs.reps[0].url, rs.reps[1].url
	const resumable = `{"model":"m","messages":[{"role":"user","content":"prefill"}],"stream":true,"max_tokens":150,"ragtime":{"resumable":true}}`
	post := func(ctx context.Context, base, body, lastID string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var text strings.Builder
	var ids []string
	var last chatFrame
	content := func(f chatFrame) {
		var ch struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if f.Data == "[DONE]" {
			return
		}
		if err := json.Unmarshal([]byte(f.Data), &ch); err != nil {
			t.Fatalf("chunk %s: %v", f.Data, err)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	resp := post(ctx, a, resumable, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resumable chat on A: %d", resp.StatusCode)
	}
	qid := resp.Header.Get("X-Ragtime-Query-Id")
	tokens := 0
	readChatFrames(resp.Body, func(f chatFrame) bool {
		ids = append(ids, f.ID)
		before := text.Len()
		content(f)
		if text.Len() > before {
			tokens++
		}
		return tokens < 5
	})
	cancel() // the connection to A drops mid-answer
	resp.Body.Close()
	time.Sleep(500 * time.Millisecond)

	resp = post(context.Background(), b, resumable, ids[len(ids)-1])
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume on the other replica: %d", resp.StatusCode)
	}
	if got := resp.Header.Get("X-Ragtime-Query-Id"); got != qid {
		t.Errorf("the resume's X-Ragtime-Query-Id is %q, want %q", got, qid)
	}
	readChatFrames(resp.Body, func(f chatFrame) bool {
		ids = append(ids, f.ID)
		content(f)
		last = f
		return true
	})
	resp.Body.Close()
	if last.Data != "[DONE]" {
		t.Fatalf("the resumed stream ends with %s\nA:\n%s", last.Data, rs.reps[0].stderr.String())
	}
	for i, id := range ids {
		if want := fmt.Sprintf("%s:%d", qid, i); id != want {
			t.Fatalf("chunk %d across both connections has id %s, want %s (each chunk once, in order)", i, id, want)
		}
	}
	if got := len(strings.Fields(text.String())); got != 150 {
		t.Errorf("%d words across both connections, want the 150 tokens of one answer, none lost or repeated", got)
	}
	for _, base := range []string{a, b} {
		resp := post(context.Background(), base, resumable, last.ID)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("reconnect after [DONE] on %s: %d, want 204", base, resp.StatusCode)
		}
	}

	// A stock client's stream: no ids, no retry hint, as before.
	resp = post(context.Background(), a, `{"model":"m","messages":[{"role":"user","content":"prefill"}],"stream":true,"max_tokens":150}`, "")
	lines := readChatFrames(resp.Body, func(chatFrame) bool { return true })
	resp.Body.Close()
	for _, line := range lines {
		if strings.HasPrefix(line, "id:") || strings.HasPrefix(line, "retry:") {
			t.Fatalf("a stream not opted in has the line %q", line)
		}
	}
	if len(lines) == 0 || lines[len(lines)-2] != "data: [DONE]" {
		t.Errorf("the stock stream ends with %q", lines[max(0, len(lines)-2):])
	}

	if n := rs.sim.Stats().Requests; n != 2 {
		t.Errorf("the model was asked %d times for two asks, want 2", n)
	}
	db := rs.db
	eventually(t, "the two queries stored", func() bool { return countRows(t, db, "queries") >= 2 })
	time.Sleep(300 * time.Millisecond)
	var n, ok int
	if err := db.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE status = 'ok') FROM queries`).Scan(&n, &ok); err != nil {
		t.Fatal(err)
	}
	if n != 2 || ok != 2 {
		t.Errorf("%d stored queries (%d ok), want 2, both ok", n, ok)
	}
}
