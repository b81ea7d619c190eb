package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime/llm/sim"
)

func TestShutdownLetsOpenStreamsFinishAndFlushes(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	_, simURL := startSim(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.OutputTokens = 5, 20, 30 })
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL,
		"--llm-model", "m", "--shutdown-timeout", "10s")

	resp, err := http.Get(srv.url + "/ask?q=prefill&max_tokens=30")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Stop the server (as SIGTERM would) once the first token is here.
	stopped := make(chan error, 1)
	var once sync.Once
	events := readEvents(t, resp.Body, func(e sseEvent) bool {
		if e.Name == "token" {
			once.Do(func() { go func() { stopped <- srv.stop() }() })
		}
		return true
	})
	if last := events[len(events)-1]; last.Name != "done" {
		t.Fatalf("the open stream was cut: last event %s", last.Name)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("serve returned %v, want nil after a graceful stop", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	// The recorder flushed before serve returned: the row is there now.
	if n := countRows(t, pool, "queries"); n != 1 {
		t.Fatalf("%d rows after shutdown, want 1", n)
	}
	if _, err := http.Get(srv.url + "/healthz"); err == nil {
		t.Error("the server still accepts connections after shutdown")
	}
	// The steps stopped in the listed order, each logged: the recorder
	// flushed before the spool and the database closed.
	log, at := srv.stderr.String(), -1
	for _, step := range []string{"index reload", "llm preflight", "search recorder", "recorder",
		"spool", "api keys sync", "listener", "parts", "database"} {
		i := strings.Index(log, "shutdown: stopped "+step+`"`)
		if i <= at {
			t.Fatalf("shutdown did not log stopping %q after the steps before it (serveSteps, reversed):\n%s", step, log)
		}
		at = i
	}
	// Parts this serve does not run (no --pprof-addr, no tracing, no
	// Redis) have nothing to stop.
	for _, step := range []string{"profiler", "tracing", "redis"} {
		if strings.Contains(log, "shutdown: stopped "+step+`"`) {
			t.Errorf("shutdown stopped %s, which this serve did not start:\n%s", step, log)
		}
	}
}

func TestCORSOnlyForConfiguredOrigins(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	tests := []struct {
		name, flag, origin, want string
	}{
		{"no flag, no header", "", "https://app.example.com", ""},
		{"allowed origin", "https://app.example.com", "https://app.example.com", "https://app.example.com"},
		{"other origin", "https://app.example.com", "https://evil.example.com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--data-dir", t.TempDir()}
			if tt.flag != "" {
				args = append(args, "--cors-origins", tt.flag)
			}
			srv := startServe(t, env, args...)
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodOptions, srv.url+"/ask", nil)
			req.Header.Set("Origin", tt.origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("Access-Control-Allow-Origin"); got != tt.want {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	var out, errOut syncBuffer
	if err := run(context.Background(), []string{"help"}, envMap(nil), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"serve", "ingest", "migrate", "llmsim"} {
		if !strings.Contains(out.String(), cmd) {
			t.Errorf("help does not list %s", cmd)
		}
	}
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"frobnicate"}, nil, `unknown command "frobnicate"`},
		{[]string{"serv"}, nil, `unknown command "serv" (did you mean serve?)`},
		{[]string{"injest", "docs"}, nil, `unknown command "injest" (did you mean ingest?)`},
		{[]string{"keys", "lst"}, nil, `unknown keys subcommand "lst" (did you mean list?); want create, list or revoke`},
		// An unreachable database does not stop serve (it spools); the
		// next mistake does.
		{[]string{"serve", "--reranker", "magic", "--data-dir", t.TempDir()}, map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=1"}, "--reranker must be"},
		{[]string{"migrate"}, map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=1"}, "cannot reach PostgreSQL"},
		{[]string{"serve", "--log-format", "xml"}, nil, "--log-format"},
		{[]string{"ingest"}, nil, "at least one PATH"},
		{[]string{"serve"}, map[string]string{"RAGTIME_MAX_CONCURRENT": "many"}, "RAGTIME_MAX_CONCURRENT"},
	}
	for _, tt := range tests {
		err := run(context.Background(), tt.args, envMap(tt.env), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ragtime %v: error %v, want it to mention %q", tt.args, err, tt.want)
		}
	}
}

// A mistyped flag or a bad value gets one line saying what to fix (the nearest
// flag name, the shape the value wants), not the whole flag list; -h still
// prints the list.
func TestFlagMistakesNameTheFix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"serve", "--adr", ":1"}, nil, "unknown flag --adr (did you mean --addr?)"},
		{[]string{"serve", "--llm-timout", "5s"}, nil, "did you mean --llm-timeout?"},
		{[]string{"serve", "--zzzzzz"}, nil, "unknown flag --zzzzzz; `ragtime serve -h` lists the flags"},
		{[]string{"serve", "--llm-timeout", "5"}, nil, `invalid value "5" for flag --llm-timeout: want a duration`},
		{[]string{"serve", "--max-concurrent", "abc"}, nil, "--max-concurrent: want a whole number"},
		{[]string{"serve"}, map[string]string{"RAGTIME_LLM_TIMEOUT": "5"}, `RAGTIME_LLM_TIMEOUT="5" (--llm-timeout): want a duration`},
		{[]string{"serve"}, map[string]string{"RAGTIME_STORE_QUESTION": "maybe"}, "(--store-question): want true or false"},
		{[]string{"serve"}, map[string]string{"RAGTIME_MAX_CONCURRENT": "many"}, "(--max-concurrent): want a whole number"},
		{[]string{"migrate", "--database-url", "not a url"}, nil, "--database-url (or DATABASE_URL) must be a PostgreSQL URL"},
		{[]string{"prune", "--older-than", "1d"}, map[string]string{"DATABASE_URL": "postgres://u:secret@h:notaport/x"}, "--database-url (or DATABASE_URL)"},
	}
	for _, tt := range tests {
		var out, errOut syncBuffer
		err := run(context.Background(), tt.args, envMap(tt.env), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ragtime %v %v: error %v, want it to contain %q", tt.args, tt.env, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ragtime %v: the error shows the password: %v", tt.args, err)
		}
		if exitCode(err) != 2 {
			t.Errorf("ragtime %v: exit code %d, want 2", tt.args, exitCode(err))
		}
		if strings.Contains(errOut.String(), "Usage:") {
			t.Errorf("ragtime %v printed the flag list on a mistake:\n%s", tt.args, errOut.String())
		}
	}
	var out, errOut syncBuffer
	if err := run(context.Background(), []string{"serve", "-h"}, envMap(nil), &out, &errOut); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve -h: %v", err)
	}
	if !strings.Contains(errOut.String(), "Usage: ragtime serve") || !strings.Contains(errOut.String(), "-llm-timeout duration") {
		t.Errorf("serve -h does not print the flags:\n%s", errOut.String())
	}
}

// The flag package takes the first `quoted` word of a usage text as the
// value's name, so a backquoted phrase shows up as "-read-only ragtime
// ingest" in -h. Every flag line of every command's -h has at most one word
// after the flag's name.
func TestHelpFlagLinesNameOneValue(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		var out, errOut syncBuffer
		_ = run(context.Background(), []string{c.name, "-h"}, envMap(nil), &out, &errOut)
		help := errOut.String() + out.String()
		if !strings.Contains(help, "Usage: ragtime "+c.name) {
			t.Errorf("%s -h printed no usage:\n%s", c.name, help)
		}
		for _, line := range strings.Split(help, "\n") {
			if !strings.HasPrefix(line, "  -") {
				continue
			}
			if f := strings.Fields(line); len(f) > 2 {
				t.Errorf("%s -h: flag line %q names more than one value word (a backquoted phrase in its usage?)", c.name, line)
			}
		}
	}
}

// TestServeReportsEveryFlagProblemAtOnce gives serve three bad settings and
// expects one usage error naming all three, before it opens anything.
func TestServeReportsEveryFlagProblemAtOnce(t *testing.T) {
	t.Parallel()
	var out, errOut syncBuffer
	err := run(context.Background(), []string{"serve", "--log-format", "xml", "--max-document-bytes", "0", "--ingest-wait", "0s",
		"--database-url", "postgres://postgres@127.0.0.1:1/never_opened"}, envMap(nil), &out, &errOut)
	if exitCode(err) != 2 {
		t.Fatalf("exit code %d (%v), want 2", exitCode(err), err)
	}
	for _, want := range []string{"--ingest-wait must be positive", "--log-format must be text or json", "--max-document-bytes must be positive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
