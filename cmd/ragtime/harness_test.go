package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/llm/sim"
	"ragtime/postgres/postgrestest"
)

// The harness runs the real program in-process: run() with real flags, a
// real Postgres database per test, a real llmsim HTTP server on 127.0.0.1:0.

// syncBuffer is an io.Writer safe to read while the program writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// envMap is a getenv over a fixed map, so tests never read the real
// environment (no stray keys, no stray DATABASE_URL).
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// runCmd runs one finite command (ingest, migrate) and returns its stdout.
func runCmd(t testing.TB, env map[string]string, args ...string) string {
	t.Helper()
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, args, envMap(env), &out, &errOut); err != nil {
		t.Fatalf("ragtime %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// server is a running `ragtime serve`.
type server struct {
	url    string
	stderr *syncBuffer
	stop   func() error
}

var servingRE = regexp.MustCompile(`serving on (http://[0-9.:]+)`)

// startServe runs `ragtime serve` on 127.0.0.1:0 and waits until it listens.
func startServe(t testing.TB, env map[string]string, args ...string) *server {
	t.Helper()
	var out syncBuffer
	errOut := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	full := append([]string{"serve", "--addr", "127.0.0.1:0", "--reload-interval", "0"}, args...)
	go func() { done <- run(ctx, full, envMap(env), &out, errOut) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := servingRE.FindStringSubmatch(out.String()); m != nil {
			s := &server{url: m[1], stderr: errOut}
			var once sync.Once
			var stopErr error
			s.stop = func() error {
				once.Do(func() {
					cancel()
					select {
					case stopErr = <-done:
					case <-time.After(30 * time.Second):
						stopErr = fmt.Errorf("serve did not stop within 30s")
					}
				})
				return stopErr
			}
			t.Cleanup(func() {
				if err := s.stop(); err != nil {
					t.Errorf("serve exited with %v\nstderr:\n%s", err, errOut.String())
				}
			})
			return s
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve exited early: %v\nstderr:\n%s", err, errOut.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve did not start\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
		}
	}
}

// startSim serves the simulator on 127.0.0.1:0.
func startSim(t testing.TB, mod func(*sim.Config)) (*sim.Server, string) {
	t.Helper()
	cfg := sim.DefaultConfig()
	mod(&cfg)
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts.URL + "/v1"
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	Name string
	Data json.RawMessage
}

func (e sseEvent) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(e.Data, v); err != nil {
		t.Fatalf("decoding %s event %s: %v", e.Name, e.Data, err)
	}
}

// readEvents parses an SSE body until it ends; onEvent may stop early by
// returning false.
func readEvents(t testing.TB, body io.Reader, onEvent func(sseEvent) bool) []sseEvent {
	t.Helper()
	var events []sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Name != "" {
				events = append(events, cur)
				if onEvent != nil && !onEvent(cur) {
					return events
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = json.RawMessage(strings.TrimPrefix(line, "data: "))
		}
	}
	return events
}

// ask sends GET /ask and returns every event of the stream.
func ask(t testing.TB, base, query string) []sseEvent {
	t.Helper()
	resp, err := http.Get(base + "/ask?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /ask?%s: %d %s", query, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	return readEvents(t, resp.Body, nil)
}

// testDB makes a fresh migrated database and a pool on it.
func testDB(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	url := postgrestest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return url, pool
}

// countRows counts the rows of a table.
func countRows(t testing.TB, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// eventually polls cond every 20 ms for up to 10 s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ingestCorpus ingests the test corpus into a fresh data dir.
func ingestCorpus(t testing.TB, env map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	out := runCmd(t, env, "ingest", "--data-dir", dir, "testdata/corpus")
	if !strings.Contains(out, "ingested 4 documents") {
		t.Fatalf("ingest said %q", out)
	}
	return dir
}

// corpusDB is a fresh database, the environment that names it and the test
// corpus ingested into a fresh data dir: what most serve tests start from.
func corpusDB(t testing.TB) (env map[string]string, dataDir string, pool *pgxpool.Pool) {
	t.Helper()
	dbURL, pool := testDB(t)
	env = map[string]string{"DATABASE_URL": dbURL}
	return env, ingestCorpus(t, env), pool
}
