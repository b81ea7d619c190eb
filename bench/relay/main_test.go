package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"ragtime/llm/sim"
)

// TestRelaysEveryTokenOfTheStream: against a real llmsim, the relay's /ask
// sends one token event per content chunk of the completion, in order, and
// then done with the embedding call's duration.
func TestRelaysEveryTokenOfTheStream(t *testing.T) {
	t.Parallel()
	cfg := sim.DefaultConfig()
	cfg.Model, cfg.PrefillMs, cfg.ITLMs, cfg.OutputTokens = "sim", 1, 1, 12
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	upstream := httptest.NewServer(s)
	t.Cleanup(upstream.Close)
	c, err := parseFlags([]string{"--base-url", upstream.URL + "/v1", "--embed-model", "sim", "--max-tokens", "4"})
	if err != nil {
		t.Fatal(err)
	}
	relay := httptest.NewServer(newRelay(c))
	t.Cleanup(relay.Close)

	resp, err := http.Get(relay.URL + "/ask?max_tokens=12&q=" + url.QueryEscape("what makes prefill slow?"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("HTTP %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var events []string
	var answer strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, name)
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && events[len(events)-1] == "done" {
			var done struct {
				EmbedMs *float64 `json:"embed_ms"`
			}
			if err := json.Unmarshal([]byte(data), &done); err != nil || done.EmbedMs == nil || *done.EmbedMs <= 0 {
				t.Errorf("done data %q: want the embedding call's duration (%v)", data, err)
			}
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && events[len(events)-1] == "token" {
			var tok struct{ Text string }
			if err := json.Unmarshal([]byte(data), &tok); err != nil {
				t.Fatalf("token data %q: %v", data, err)
			}
			answer.WriteString(tok.Text)
		}
	}
	if len(events) != 13 || events[12] != "done" {
		t.Fatalf("events %v; want 12 tokens and done", events)
	}
	if answer.Len() == 0 {
		t.Error("the tokens carry no text")
	}
}

// TestBadRequestsNameTheProblem: a missing question is a 400 naming q, a
// bad max_tokens one naming max_tokens, and bad flags (a profiler off
// loopback among them) name the flag.
func TestBadRequestsNameTheProblem(t *testing.T) {
	t.Parallel()
	if _, err := parseFlags([]string{"--base-url", "127.0.0.1:1", "--max-tokens", "0", "--pprof-addr", "0.0.0.0:6060"}); err == nil ||
		!strings.Contains(err.Error(), "--base-url") || !strings.Contains(err.Error(), "--max-tokens") || !strings.Contains(err.Error(), "--pprof-addr") {
		t.Errorf("bad flags: %v; want all three named", err)
	}
	c, err := parseFlags([]string{"--base-url", "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	newRelay(c).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ask?q=+", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "q:") {
		t.Errorf("empty q: %d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	newRelay(c).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ask?q=x&max_tokens=0", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "max_tokens:") {
		t.Errorf("max_tokens=0: %d %q", rec.Code, rec.Body.String())
	}
}

func TestContentOf(t *testing.T) {
	t.Parallel()
	for chunk, want := range map[string]string{
		`{"choices":[{"delta":{"content":"a \"b\" \\"},"logprobs":null}]}`: `"a \"b\" \\"`,
		`{"choices":[{"delta":{"role":"assistant","content":""}}]}`:        "",
		`{"choices":[{"delta":{"content":null}}]}`:                         "",
		`{"choices":[{"delta":{"reasoning_content":"x"}}]}`:                "",
		`{"choices":[{"delta":{"content":"unterminated}}]}`:                "",
	} {
		if got := string(contentOf([]byte(chunk))); got != want {
			t.Errorf("contentOf(%s) = %s, want %s", chunk, got, want)
		}
	}
}

// TestProfilerServesApartFromAsk: with --pprof-addr the profile is served
// on its own loopback listener, not on /ask's, whose address is printed
// first.
func TestProfilerServesApartFromAsk(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"--base-url", "http://127.0.0.1:1/v1", "--pprof-addr", "127.0.0.1:0"}, pw)
		pw.Close()
		errc <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Error(err)
		}
	})
	// The first two lines: /ask's address, then the profiler's.
	sc := bufio.NewScanner(pr)
	var lines []string
	for len(lines) < 2 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	go io.Copy(io.Discard, pr) // anything run writes after them
	serving := regexp.MustCompile(`^relay serving on (http://127\.0\.0\.1:[0-9]+)`)
	profiler := regexp.MustCompile(`^relay profiler on (http://127\.0\.0\.1:[0-9]+)`)
	if len(lines) < 2 {
		t.Fatalf("run printed %q", lines)
	}
	relayURL, profURL := serving.FindStringSubmatch(lines[0]), profiler.FindStringSubmatch(lines[1])
	if relayURL == nil || profURL == nil {
		t.Fatalf("want /ask's address, then the profiler's (bench-peer.sh reads the first URL as the relay's); run printed %q", lines)
	}
	for url, want := range map[string]int{profURL[1] + "/debug/pprof/cmdline": http.StatusOK, relayURL[1] + "/debug/pprof/cmdline": http.StatusNotFound} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: HTTP %d, want %d", url, resp.StatusCode, want)
		}
	}
}
