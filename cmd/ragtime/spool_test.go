package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/auth"
	"ragtime/postgres/postgrestest"
)

// absentDatabase returns the URL of a database that does not exist yet on
// the test server (dropped at cleanup once something created it).
func absentDatabase(t *testing.T) string {
	t.Helper()
	u := postgrestest.NewEmptyDatabase(t)
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, postgrestest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return u
}

// waitUntil polls cond every 50 ms for up to d.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getBody GETs url and returns the status code and body.
func getBody(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// readyz returns /readyz's status code and body.
func readyz(t testing.TB, base string) (int, string) { return getBody(t, base+"/readyz") }

// storedCount counts how many of ids are in the queries table.
func storedCount(t testing.TB, pool *pgxpool.Pool, ids []string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM queries WHERE id::text = ANY($1)", ids).Scan(&n); err != nil {
		return -1 // the database may not exist yet
	}
	return n
}

// TestServeStartsWithoutPostgres starts serve while PostgreSQL is away and
// its database does not even exist: it answers from the index, reports the
// database part degraded with the spool, and when PostgreSQL answers it
// creates and migrates the database and writes every spooled query.
func TestServeStartsWithoutPostgres(t *testing.T) {
	t.Parallel()
	u := absentDatabase(t)
	dataDir := ingestCorpus(t, map[string]string{})
	// A serve that ran here before read that there are no keys: without
	// that snapshot, keys might exist and serve would refuse every request.
	noKeys := auth.NewKeyring()
	noKeys.Set(nil)
	if err := noKeys.SaveSnapshot(filepath.Join(dataDir, keysSnapshotFile)); err != nil {
		t.Fatal(err)
	}
	proxy := postgrestest.NewProxy(t, postgrestest.HostPort(t, u))
	proxy.Cut()
	srv := startServe(t, map[string]string{"DATABASE_URL": proxy.URL(u)}, "--data-dir", dataDir)

	var ids []string
	for i := range 5 {
		d := lastDone(t, ask(t, srv.url, "q="+url.QueryEscape(fmt.Sprintf("what does prefill read %d", i))))
		ids = append(ids, d.QueryID)
	}
	status, body := readyz(t, srv.url)
	if status != http.StatusOK || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, `"index":"ok"`) {
		t.Errorf("/readyz while PostgreSQL is away = %d %s, want 200 degraded", status, body)
	}
	waitUntil(t, 10*time.Second, "the spool to hold the 5 queries", func() bool {
		return strings.Contains(scrapeMetrics(t, srv.url), "ragtime_spool_records 5\n")
	})

	proxy.Restore()
	waitUntil(t, 60*time.Second, "/readyz to be ok", func() bool {
		status, body := readyz(t, srv.url)
		return status == http.StatusOK && strings.Contains(body, `"status":"ok"`)
	})
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	waitUntil(t, 30*time.Second, "the spooled queries in PostgreSQL", func() bool { return storedCount(t, pool, ids) == len(ids) })
	waitUntil(t, 10*time.Second, "the spool to be empty", func() bool {
		return strings.Contains(scrapeMetrics(t, srv.url), "ragtime_spool_records 0\n")
	})
	logs := srv.stderr.String()
	for _, line := range []string{"PostgreSQL is unavailable: serving anyway", "database ready and migrated", "spooling finished queries to disk", "spool drained into PostgreSQL"} {
		if !strings.Contains(logs, line) {
			t.Errorf("no log line %q:\n%s", line, logs)
		}
	}
}

// TestServeRefusesNewerSchema: a database a newer ragtime migrated stops
// serve at start with a message saying what to do.
func TestServeRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	u, pool := testDB(t)
	if _, err := pool.Exec(context.Background(), "INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)"); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, envMap(map[string]string{"DATABASE_URL": u}), &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "newer than this ragtime knows") {
		t.Errorf("serve = %v, want a refusal naming the newer schema", err)
	}
}

func scrapeMetrics(t testing.TB, base string) string {
	_, body := getBody(t, base+"/metrics")
	return body
}

// The binary tests that need real processes run, built once per package
// run (a build per test made several links at once on two cores) and
// removed by TestMain.
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// ragtimeBinary builds cmd/ragtime once, for tests that need a real
// process (to kill, or to run several side by side).
func ragtimeBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "ragtime-bin"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ragtime")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if out, err := exec.Command(gobin, "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// child is a `ragtime serve` running as its own process.
type child struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	exited chan error
}

// startChild runs `ragtime serve` as a child process and waits until it
// listens.
func startChild(t testing.TB, bin, databaseURL string, args ...string) *child {
	t.Helper()
	full := append([]string{"serve", "--addr", "127.0.0.1:0", "--reload-interval", "0"}, args...)
	cmd := exec.Command(bin, full...)
	cmd.Env = []string{"DATABASE_URL=" + databaseURL, "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan error, 1)}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case c.url = <-found:
		return c
	case err := <-c.exited:
		t.Fatalf("serve exited at start: %v\nstderr:\n%s", err, c.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not start\nstderr:\n%s", c.stderr.String())
	}
	return nil
}

// askDone asks one question and returns the query id of its done event;
// ok is false when no done event arrived (the server died, say).
func askDone(client *http.Client, base, q string) (id string, ok bool) {
	resp, err := client.Get(base + "/ask?q=" + url.QueryEscape(q))
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	isDone := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "event: done":
			isDone = true
		case isDone && strings.HasPrefix(line, "data: "):
			var d struct {
				QueryID string `json:"query_id"`
			}
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d) == nil && d.QueryID != "" {
				return d.QueryID, true
			}
			return "", false
		}
	}
	return "", false
}

// TestKill9DuringOutageLosesNoDoneQuery kills a real `ragtime serve` with
// SIGKILL while PostgreSQL is away and queries keep arriving, restarts it
// (still without PostgreSQL), and brings PostgreSQL back: every query whose
// done event a client received is in PostgreSQL.
func TestKill9DuringOutageLosesNoDoneQuery(t *testing.T) {
	t.Parallel()
	u, pool := testDB(t)
	dataDir := ingestCorpus(t, map[string]string{})
	proxy := postgrestest.NewProxy(t, postgrestest.HostPort(t, u))
	// Load from one client IP: lift the per-caller limits.
	args := []string{"--data-dir", dataDir, "--recorder-queue", "20", "--rate", "0", "--max-concurrent-per-caller", "64"}
	bin := ragtimeBinary(t)
	first := startChild(t, bin, proxy.URL(u), args...)
	client := &http.Client{Timeout: 30 * time.Second}

	var mu sync.Mutex
	var done []string
	for i := range 5 {
		id, ok := askDone(client, first.url, fmt.Sprintf("what does prefill read %d", i))
		if !ok {
			t.Fatalf("ask %d got no done\nstderr:\n%s", i, first.stderr.String())
		}
		done = append(done, id)
	}
	waitUntil(t, 10*time.Second, "the first queries in PostgreSQL", func() bool { return storedCount(t, pool, done) == 5 })

	proxy.Cut()
	cutAt := time.Now()
	// Askers keep asking through the kill; only queries whose done
	// arrived count.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var outage atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := 0; i < 2000 && !stop.Load(); i++ {
				id, ok := askDone(client, first.url, fmt.Sprintf("how is decode timed %d %d", g, i))
				if !ok {
					return
				}
				outage.Add(1)
				mu.Lock()
				done = append(done, id)
				mu.Unlock()
			}
		})
	}
	waitUntil(t, 30*time.Second, "asks during the outage", func() bool {
		if time.Since(cutAt) > 29*time.Second {
			t.Logf("%d asks done during the outage; stderr:\n%s", outage.Load(), first.stderr.String())
		}
		if outage.Load() < 200 {
			return false
		}
		// The guarantee starts once the recorder has noticed the outage
		// (its first failed write, within a flush interval: 200 ms) and
		// moved its memory queue to the spool (docs/recording.md). With
		// fast answers 200 asks can finish before that.
		m := scrapeMetrics(t, first.url)
		return metricValue(m, "ragtime_recorder_spooling") == 1 && metricValue(m, "ragtime_recorder_queue_depth") == 0
	})
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	stop.Store(true)
	wg.Wait()
	segs, _ := filepath.Glob(filepath.Join(dataDir, "spool", "*.seg"))
	if len(segs) == 0 {
		t.Fatalf("no spool segment after kill -9\nstderr:\n%s", first.stderr.String())
	}

	// Restart while PostgreSQL is still away: serve starts, replays
	// nothing yet, and keeps answering.
	second := startChild(t, bin, proxy.URL(u), args...)
	for i := range 5 {
		id, ok := askDone(client, second.url, fmt.Sprintf("what is cached %d", i))
		if !ok {
			t.Fatalf("ask after restart got no done\nstderr:\n%s", second.stderr.String())
		}
		done = append(done, id)
	}
	if status, body := readyz(t, second.url); status != http.StatusOK || !strings.Contains(body, `"status":"degraded"`) {
		t.Errorf("/readyz after restart without PostgreSQL = %d %s", status, body)
	}

	proxy.Restore()
	waitUntil(t, 90*time.Second, "every query whose done was sent in PostgreSQL", func() bool {
		return storedCount(t, pool, done) == len(done)
	})
	var stages int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM query_stages WHERE query_id::text = ANY($1)", done).Scan(&stages); err != nil {
		t.Fatal(err)
	}
	if stages < len(done)*6 {
		t.Errorf("%d stage rows for %d queries", stages, len(done))
	}
	t.Logf("%d queries with done (%d during the outage before kill -9), all stored", len(done), outage.Load())
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second.exited:
		if err != nil {
			t.Errorf("serve exited with %v\nstderr:\n%s", err, second.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("serve did not stop on SIGTERM")
	}
	if !strings.Contains(second.stderr.String(), "from a previous run") {
		t.Errorf("the restart did not say it replays a previous run's spool:\n%s", second.stderr.String())
	}
}
