package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"ragtime"
	"ragtime/internal/golden"
	"ragtime/llm/sim"
	"ragtime/llm/ttft"
	"ragtime/pipeline"
)

// runOut runs one command and returns its stdout, stderr and error.
func runOut(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, args, envMap(env), &out, &errOut)
	return out.String(), errOut.String(), err
}

// configRow finds a setting's line in `ragtime config` output.
func configRow(t *testing.T, out, setting string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == setting {
			return f
		}
		if setting == "api key" && strings.HasPrefix(line, "api key") {
			return strings.Fields(strings.TrimPrefix(line, "api key"))
		}
	}
	t.Fatalf("no %s in\n%s", setting, out)
	return nil
}

func TestConfigFileAndPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	toml := filepath.Join(dir, "ragtime.toml")
	if err := os.WriteFile(toml, []byte(`
[llm]
provider = "openai"
base_url = "https://taotoken.net/api"
api_key_env = "TAOTOKEN_API_KEY"
default_model = "deepseek-v3"
timeout_seconds = 90
max_retries = 4

[other_tool]
anything = true
`), 0o600); err != nil {
		t.Fatal(err)
	}
	jsonFile := filepath.Join(dir, "ragtime.json")
	if err := os.WriteFile(jsonFile, []byte(`{"llm": {"provider": "anthropic", "default_model": "claude-sonnet-4-5", "timeout_seconds": 12.5}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const key = "sk-taotoken-0123456789wxyz"
	env := map[string]string{"TAOTOKEN_API_KEY": key, "RAGTIME_LLM_MAX_RETRIES": "1"}
	out, _, err := runOut(t, env, "config", "--config", toml, "--llm-model", "qwen3-32b")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"llm-provider":    {"openai", "file"},
		"llm-base-url":    {"https://taotoken.net/api", "file"},
		"llm-api-key-env": {"TAOTOKEN_API_KEY", "file"},
		"llm-model":       {"qwen3-32b", "flag"},
		"llm-timeout":     {"1m30s", "file"},
		"llm-max-retries": {"1", "env"},
		"addr":            {"127.0.0.1:8080", "default"},
	}
	for setting, w := range want {
		row := configRow(t, out, setting)
		if row[1] != w[0] || row[2] != w[1] {
			t.Errorf("%s = %v, want value %s from %s", setting, row[1:], w[0], w[1])
		}
	}
	if row := configRow(t, out, "api key"); row[0] != "sk-…wxyz" || row[2] != "TAOTOKEN_API_KEY" {
		t.Errorf("api key row %v", row)
	}
	if strings.Contains(out, key) || strings.Contains(out, "0123456789") {
		t.Errorf("config printed the key:\n%s", out)
	}
	// The llm rows as a whole, file path masked and columns joined by " | "
	// (their widths follow the longest value of any row): testdata/
	// config_llm.golden. Only these rows, so that a new flag elsewhere does
	// not rewrite it.
	var llmRows strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "SETTING") || strings.HasPrefix(line, "llm-") || strings.HasPrefix(line, "api key") {
			cols := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(strings.ReplaceAll(line, dir, "$DIR")), -1)
			llmRows.WriteString(strings.Join(cols, " | ") + "\n")
		}
	}
	golden.Check(t, "config_llm.golden", []byte(llmRows.String()))

	// JSON, and the anthropic fallback variable.
	out, _, err = runOut(t, map[string]string{"ANTHROPIC_API_KEY": "sk-ant-api03-abcdefghijkl"}, "config", "--config", jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	if row := configRow(t, out, "llm-timeout"); row[1] != "12.5s" {
		t.Errorf("timeout row %v", row)
	}
	if row := configRow(t, out, "api key"); row[0] != "sk-…ijkl" || row[2] != "ANTHROPIC_API_KEY" {
		t.Errorf("api key row %v", row)
	}

	// Mistakes name the file and the key; a key in the file is refused
	// without being echoed.
	bad := []struct{ name, body, want string }{
		{"unknown.toml", "[llm]\nbase_uri = \"x\"\n", "unknown key llm.base_uri"},
		{"key.toml", "[llm]\napi_key = \"sk-secret-in-file-9999\"\n", "never read from a file"},
		{"broken.json", `{"llm": {"provider": }`, "not valid JSON"},
		{"type.toml", "[llm]\nmax_retries = \"three\"\n", "llm.max_retries"},
		{"nollm.toml", "[models]\nx = 1\n", "no llm section"},
	}
	for _, b := range bad {
		path := filepath.Join(dir, b.name)
		if err := os.WriteFile(path, []byte(b.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := runOut(t, nil, "config", "--config", path)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want a usage error naming %q and the file", b.name, err, b.want)
		}
		if err != nil && strings.Contains(err.Error(), "sk-secret-in-file") {
			t.Errorf("%s: the error echoes the key", b.name)
		}
	}
	_, _, err = runOut(t, nil, "config", "--config", filepath.Join(dir, "missing.toml"))
	if err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("missing file: %v", err)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestDoctorAgainstLLMSim(t *testing.T) {
	t.Parallel()
	const key = "sk-doctor-0123456789abcd"
	_, simURL := startSim(t, func(c *sim.Config) { c.APIKey, c.Model, c.PrefillMs, c.ITLMs = key, "sim-7b", 1, 1 })
	_, faultyURL := startSim(t, func(c *sim.Config) { c.Faults, c.Model = "500=1", "sim-7b" })
	_, limitedURL := startSim(t, func(c *sim.Config) { c.Faults, c.RetryAfterSeconds, c.Model = "429=1", 3, "sim-7b" })
	_, stallURL := startSim(t, func(c *sim.Config) { c.Faults, c.StallMs, c.Model = "stall=1", 5000, "sim-7b" })
	_, anyURL := startSim(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs = 1, 1 }) // answers any model name, as llama.cpp's server
	closed := closedAddr(t)
	base := func(u string) []string {
		return []string{"doctor", "--llm-provider", "openai", "--llm-base-url", u, "--llm-model", "sim-7b"}
	}
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		failAt    string // "" means every check passes
		wantInOut []string
	}{
		{name: "all well", args: base(simURL), env: map[string]string{"RAGTIME_LLM_API_KEY": key},
			wantInOut: []string{"ok    api key        sk-…abcd from RAGTIME_LLM_API_KEY", "ok    models         1 listed", "ok    first token    TTFT"}},
		{name: "a model answered but not listed", args: append(base(anyURL)[:5], "--llm-model", "any"), env: nil,
			wantInOut: []string{`WARN  models         llm_model_not_found: "any" is not among the 1 models the provider lists: llmsim`, "ok    first token    TTFT"}},
		{name: "key with a newline", args: base(simURL), env: map[string]string{"RAGTIME_LLM_API_KEY": key + "\n"},
			failAt: "api key", wantInOut: []string{"llm_auth", "newline", "hint:"}},
		{name: "missing key, remote host", args: base("https://api.example.com/v1"), env: nil,
			failAt: "api key", wantInOut: []string{"RAGTIME_LLM_API_KEY is not set", "export RAGTIME_LLM_API_KEY"}},
		{name: "wrong key", args: base(simURL), env: map[string]string{"RAGTIME_LLM_API_KEY": "sk-wrong-000000000000"},
			failAt: "first token", wantInOut: []string{"WARN  models         llm_auth", "HTTP 401", "hint: check that RAGTIME_LLM_API_KEY"}},
		{name: "unknown model", args: append(base(simURL)[:5], "--llm-model", "gpt-nope"), env: map[string]string{"RAGTIME_LLM_API_KEY": key},
			failAt: "first token", wantInOut: []string{"WARN  models         llm_model_not_found", `"gpt-nope" is not among the 1 models the provider lists: sim-7b`, "FAIL  first token    llm_model_not_found", "one of: sim-7b"}},
		{name: "connection refused", args: base("http://" + closed + "/v1"), env: nil,
			failAt: "connect", wantInOut: []string{"llm_connect", "tcp connect to " + closed, "hint: check the host and port"}},
		{name: "dns", args: base("https://llm.nonexistent.invalid/v1"), env: map[string]string{"RAGTIME_LLM_API_KEY": key},
			failAt: "dns", wantInOut: []string{"llm_connect", "could not resolve llm.nonexistent.invalid"}},
		{name: "https to a plain http server", args: base(strings.Replace(simURL, "http://", "https://", 1)), env: map[string]string{"RAGTIME_LLM_API_KEY": key},
			failAt: "connect", wantInOut: []string{"TLS handshake", "use http://"}},
		{name: "unreachable proxy", args: base("http://llm.example:8000/v1"), env: map[string]string{"RAGTIME_LLM_API_KEY": key, "HTTP_PROXY": "http://user:pw@" + closed},
			failAt: "connect", wantInOut: []string{"requests go through http://user:xxxxx@" + closed, "HTTP_PROXY=http://user:xxxxx@", "the proxy is not reachable"}},
		{name: "server error", args: base(faultyURL), env: nil,
			failAt: "first token", wantInOut: []string{"llm_unavailable", "HTTP 500"}},
		{name: "rate limited", args: base(limitedURL), env: nil,
			failAt: "first token", wantInOut: []string{"llm_rate_limited", "retry after 3s"}},
		{name: "no first token in time", args: append(base(stallURL), "--llm-ttft-timeout", "100ms"), env: nil,
			failAt: "first token", wantInOut: []string{"llm_timeout", "--llm-ttft-timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runOut(t, tt.env, tt.args...)
			if tt.failAt == "" {
				if err != nil {
					t.Fatalf("doctor failed: %v\n%s", err, out)
				}
			} else {
				if !errors.Is(err, errDoctorFailed) {
					t.Fatalf("doctor returned %v, want a failure at %s\n%s", err, tt.failAt, out)
				}
				lines := strings.Split(strings.TrimSpace(out), "\n")
				failLine := -1
				for i, l := range lines {
					if strings.HasPrefix(l, "FAIL") {
						failLine = i
						break
					}
				}
				if failLine < 0 || !strings.HasPrefix(lines[failLine], "FAIL  "+tt.failAt) {
					t.Errorf("want the first failure at %q:\n%s", tt.failAt, out)
				}
				for _, l := range lines[failLine+1:] {
					if !strings.Contains(l, "hint:") {
						t.Errorf("doctor went on after the failure: %q", l)
					}
				}
			}
			for _, s := range tt.wantInOut {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			if strings.Contains(out, key) || strings.Contains(out, "0123456789") {
				t.Errorf("doctor printed the key:\n%s", out)
			}
		})
	}
}

func TestTTFTCommand(t *testing.T) {
	t.Parallel()
	_, simURL := startSim(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs, c.ReasoningTokens = 2, 1, 2 })
	args := []string{"ttft", "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "m"}

	out, _, err := runOut(t, nil, append(args, "--runs", "3")...)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[0], "[cold]") || strings.Contains(lines[1]+lines[2], "[cold]") {
		t.Fatalf("want three runs, the first marked cold, and a summary:\n%s", out)
	}
	if !strings.Contains(lines[1], "first answer token") || !strings.Contains(lines[1], "reused connection") {
		t.Errorf("a warm reasoning run should show the answer latency on a reused connection: %q", lines[1])
	}
	if !strings.Contains(lines[3], "median") || !strings.Contains(lines[3], "p95") || !strings.Contains(lines[3], "first answer token median") {
		t.Errorf("summary %q", lines[3])
	}

	out, _, err = runOut(t, nil, append(args, "--runs", "2", "--prompt-tokens", "50,800", "--max-tokens", "4,40", "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Series []ttft.Series `json:"series"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if len(res.Series) != 4 {
		t.Fatalf("%d series, want 4 (2 prompt lengths × 2 answer limits)", len(res.Series))
	}
	for i, s := range res.Series {
		want := [][2]int{{50, 4}, {50, 40}, {800, 4}, {800, 40}}[i]
		if s.PromptTokens != want[0] || s.MaxTokens != want[1] || len(s.Runs) != 2 {
			t.Errorf("series %d: %d/%d tokens, %d runs", i, s.PromptTokens, s.MaxTokens, len(s.Runs))
		}
		for j, r := range s.Runs {
			if r.Cold != (i == 0 && j == 0) || r.Reused == r.Cold || r.AnswerMs == nil || *r.AnswerMs < r.TTFTMs {
				t.Errorf("series %d run %d: %+v", i, j, r)
			}
		}
		if s.MinMs > s.MedianMs || s.MedianMs > s.P95Ms || s.P95Ms > s.MaxMs {
			t.Errorf("series %d statistics out of order: %+v", i, s)
		}
	}

	out, _, err = runOut(t, nil, append(args, "--runs", "3", "--new-connection", "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Series[0].Runs {
		if r.Reused || !r.Cold {
			t.Errorf("--new-connection run reused a connection: %+v", r)
		}
	}

	if _, _, err := runOut(t, nil, append(args, "--runs", "0")...); err == nil || !strings.Contains(err.Error(), "--runs") {
		t.Errorf("--runs 0: %v", err)
	}
	if _, _, err := runOut(t, nil, append(args, "--prompt-tokens", "50,x")...); err == nil || !strings.Contains(err.Error(), "prompt-tokens") {
		t.Errorf("--prompt-tokens 50,x: %v", err)
	}
}

// TestKeyHygieneEndToEnd runs a succeeding and a failing query with a known
// key (the failing upstream echoes it back, as OpenAI's 401 does) and
// checks the key is in no log line, no stored row and no SSE byte.
func TestKeyHygieneEndToEnd(t *testing.T) {
	t.Parallel()
	const key = "sk-hygiene-7Q2mV9xLk3Rt8Zp4"
	secrets := []string{key, "7Q2mV9xLk3Rt8Zp4", "sk-hygie", "k3Rt8Zp4"}
	dbURL, pool := testDB(t)
	dataDir := ingestCorpus(t, map[string]string{"DATABASE_URL": dbURL})
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_LLM_API_KEY": key}

	simSrv, simURL := startSim(t, func(c *sim.Config) {
		c.APIKey, c.ServerTimings, c.ReasoningTokens, c.PrefillMs, c.ITLMs, c.OutputTokens = key, true, 3, 2, 1, 20
	})
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req_echo")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+r.Header.Get("Authorization")+`; key sk-hygie****************8Zp4","type":"invalid_request_error","code":"invalid_api_key"}}`)
	}))
	t.Cleanup(echo.Close)

	good := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "m",
		"--log-format", "json", "--hide-reasoning", "--llm-warmup=request")
	eventually(t, "the warm-up request", func() bool { return simSrv.Stats().Completed == 1 })
	bad := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", echo.URL+"/v1", "--llm-model", "m", "--log-format", "json")

	var stream strings.Builder
	raw := func(base string) []sseEvent {
		resp, err := http.Get(base + "/ask?q=prefill")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		stream.Write(b)
		return readEvents(t, strings.NewReader(string(b)), nil)
	}
	okEvents := raw(good.url)
	badEvents := raw(bad.url)
	if last := okEvents[len(okEvents)-1]; last.Name != "done" {
		t.Fatalf("the good query ended with %s %s", last.Name, last.Data)
	}
	for _, e := range okEvents {
		if e.Name == "reasoning" {
			t.Errorf("--hide-reasoning forwarded %s", e.Data)
		}
	}
	var fail ragtime.Error
	badEvents[len(badEvents)-1].decode(t, &fail)
	if fail.Code != "llm_auth" {
		t.Fatalf("the bad query failed with %+v", fail)
	}

	var okMeta, badMeta pipeline.Meta
	okEvents[0].decode(t, &okMeta)
	badEvents[0].decode(t, &badMeta)
	eventually(t, "both rows", func() bool { return countRows(t, pool, "queries") == 2 })

	// The good row: reused warm connection, server timings, reasoning timed.
	var reused bool
	var serverQueue, serverPrefill, firstToken, ttft *float64
	var reasoningTokens int
	err := pool.QueryRow(context.Background(), `SELECT conn_reused, server_queue_ms, server_prefill_ms, first_token_ms, ttft_ms, reasoning_tokens
		FROM queries WHERE id = $1`, okMeta.QueryID).Scan(&reused, &serverQueue, &serverPrefill, &firstToken, &ttft, &reasoningTokens)
	if err != nil {
		t.Fatal(err)
	}
	if !reused || serverQueue == nil || serverPrefill == nil || firstToken == nil || ttft == nil || *firstToken > *ttft || reasoningTokens != 3 {
		t.Errorf("good row: reused %v, server queue %v prefill %v, first token %v ttft %v, reasoning tokens %d",
			reused, serverQueue, serverPrefill, firstToken, ttft, reasoningTokens)
	}
	var status, requestID string
	var upstream int
	err = pool.QueryRow(context.Background(), `SELECT status, upstream_status, request_id FROM queries WHERE id = $1`, badMeta.QueryID).Scan(&status, &upstream, &requestID)
	if err != nil || status != "error" || upstream != 401 || requestID != "req_echo" {
		t.Errorf("bad row: %s %d %q %v", status, upstream, requestID, err)
	}

	// Nowhere: rows, stream, logs.
	var rows string
	err = pool.QueryRow(context.Background(), `SELECT (SELECT coalesce(string_agg(row_to_json(q)::text, E'\n'), '') FROM queries q)
		|| (SELECT coalesce(string_agg(row_to_json(s)::text, E'\n'), '') FROM query_stages s)`).Scan(&rows)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rows, "Incorrect API key provided") {
		t.Errorf("the upstream error message was not stored, so the check below proves little:\n%s", rows)
	}
	for _, where := range []struct{ name, text string }{
		{"a stored row", rows}, {"the SSE stream", stream.String()},
		{"the good server's log", good.stderr.String()}, {"the bad server's log", bad.stderr.String()},
	} {
		for _, s := range secrets {
			if strings.Contains(where.text, s) {
				t.Errorf("%q appears in %s", s, where.name)
			}
		}
	}
}

// TestConfigShowsTheEffectiveOTLPEndpoint: with the endpoint set by the
// OpenTelemetry variables alone, `ragtime config` shows where traces go
// and which variable said so, not the empty flag.
func TestConfigShowsTheEffectiveOTLPEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env      map[string]string
		args     []string
		want     []string // value, then the words of its source
		protocol []string
	}{
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			want: []string{"http://127.0.0.1:4318/v1/traces", "env", "OTEL_EXPORTER_OTLP_ENDPOINT"}, protocol: []string{"http/protobuf", "default"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want:     []string{"http://127.0.0.1:4317", "env", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
			protocol: []string{"grpc", "env", "OTEL_EXPORTER_OTLP_PROTOCOL"}},
		{env: map[string]string{"RAGTIME_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
			want: []string{"http://127.0.0.1:4318/v1/traces", "env", "RAGTIME_OTLP_ENDPOINT"}, protocol: []string{"http/protobuf", "default"}},
		{args: []string{"--otlp-endpoint", "http://127.0.0.1:4318/"},
			want: []string{"http://127.0.0.1:4318/v1/traces", "flag"}, protocol: []string{"http/protobuf", "default"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
			want: []string{`""`, "off:", "env", "OTEL_SDK_DISABLED=true"}},
	} {
		out, _, err := runOut(t, tc.env, append([]string{"config"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if row := configRow(t, out, "otlp-endpoint"); !slices.Equal(row[1:], tc.want) {
			t.Errorf("env %v args %v: otlp-endpoint row %v, want %v", tc.env, tc.args, row[1:], tc.want)
		}
		if tc.protocol != nil {
			if row := configRow(t, out, "otlp-protocol"); !slices.Equal(row[1:], tc.protocol) {
				t.Errorf("env %v: otlp-protocol row %v, want %v", tc.env, row[1:], tc.protocol)
			}
		}
	}
}
