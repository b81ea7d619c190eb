package main

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ragtime/metrics"
)

func TestParseFlagsTargetsAndHold(t *testing.T) {
	t.Parallel()
	base := []string{"-sim", "http://127.0.0.1:1/v1", "-ragtime", "http://127.0.0.1:2"}
	c, err := parseFlags(append(base, "-targets", "ragtime", "-hold", "2000"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.targets, []string{"llmsim", "ragtime"}) || c.has("peer") || c.hold.streams != 2000 {
		t.Errorf("targets %v hold %d", c.targets, c.hold.streams)
	}
	if c, err := parseFlags(append(base, "-targets", "ragtime", "-stagger", "335ms")); err != nil {
		t.Errorf("-stagger 335ms: %v", err)
	} else if c.stagger.Milliseconds() != 335 {
		t.Errorf("-stagger 335ms parsed as %s", c.stagger)
	}
	// Without the peer among the targets its URL is not needed; with it, it is.
	if _, err := parseFlags(base); err == nil || !strings.Contains(err.Error(), "-peer") {
		t.Errorf("default targets without -peer: %v, want an error naming -peer", err)
	}
	for _, bad := range [][]string{
		{"-targets", "ragtime,langchain"},
		{"-targets", "ragtime,relay"}, // the relay's URL is missing
		{"-targets", "ragtime", "-hold", "10", "-hold-target", "peer"},
		{"-hold", "-1"},
		{"-hold", "10", "-hold-probes", "0"},
		{"-targets", "ragtime", "-stagger", "-1ms"},
		{"-targets", "ragtime", "-stagger", "11s"},
		{"-targets", "ragtime", "-hold", "10", "-hold-profile", "cpu.pprof"}, // no -hold-pprof
		{"-targets", "ragtime", "-hold", "10", "-hold-profile", "cpu.pprof", "-hold-pprof", "http://10.0.0.1:6060"},
		{"-targets", "ragtime", "-hold", "10", "-hold-profile", "cpu.pprof", "-hold-pprof", "http://127.0.0.1:6060", "-hold-profile-for", "2m"},
	} {
		if _, err := parseFlags(append(base, bad...)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestWriteCallsCountsWrites: the count comes from /proc/<pid>/io and
// moves with the process's own writes.
func TestWriteCallsCountsWrites(t *testing.T) {
	t.Parallel()
	w0 := writeCalls(os.Getpid())
	if err := os.WriteFile(filepath.Join(t.TempDir(), "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if w1 := writeCalls(os.Getpid()); w1 <= w0 {
		t.Errorf("write system calls %d after a write, %d before", w1, w0)
	}
	if w := writeCalls(0); w != 0 {
		t.Errorf("pid 0: %d", w)
	}
}

// TestBusiestSecond: a wave of CPU shows as the busiest sliding second,
// while the median second stays at the calm rate.
func TestBusiestSecond(t *testing.T) {
	t.Parallel()
	// 200 ms samples of a cumulative CPU time: 100 ms per sample (500 ms a
	// second), and one burst of 300 ms per sample for a second.
	var cum []float64
	total := 0.0
	for i := range 30 {
		step := 100.0
		if i >= 10 && i < 15 {
			step = 300
		}
		total += step
		cum = append(cum, total)
	}
	busiest, median := busiestSecond(cum, 5)
	if busiest != 1500 || median != 500 {
		t.Errorf("busiest %v, median %v; want 1500 and 500", busiest, median)
	}
	if b, m := busiestSecond(cum[:3], 5); !math.IsNaN(b) || !math.IsNaN(m) {
		t.Errorf("under a second of samples: %v, %v; want NaN", b, m)
	}
}

// TestSplitByWaves: probes that start within half a second of a burst of
// held asks are in a wave; the others, and the mean rate, are read off the
// probes' span.
func TestSplitByWaves(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Ten held asks a second for 20 s, and 100 more within 10.0–10.5 s.
	var asks []time.Time
	for i := range 200 {
		asks = append(asks, at(float64(i)/10))
	}
	for i := range 100 {
		asks = append(asks, at(10+float64(i)/200))
	}
	// A probe a second from 1 s to 19 s; its TTFT is its start second.
	var probes []time.Time
	var ttfts []float64
	for s := 1; s <= 19; s++ {
		probes, ttfts = append(probes, at(float64(s))), append(ttfts, float64(s))
	}
	w := splitByWaves(probes, ttfts, asks)
	// From half a second before the first probe to half a second after
	// the last: 190 + 100 asks in 19 s.
	if want := 290.0 / 19; math.Abs(w.meanRate-want) > 0.01 {
		t.Errorf("mean rate %v, want %v", w.meanRate, want)
	}
	if !slices.Equal(w.in, []float64{10}) {
		t.Errorf("in waves: %v, want the probe at 10 s alone (its second, 9.5–10.5 s, holds the burst)", w.in)
	}
	if len(w.out) != 18 || slices.Contains(w.out, 10) {
		t.Errorf("outside: %v", w.out)
	}
	if e := splitByWaves(nil, nil, asks); len(e.in)+len(e.out) != 0 {
		t.Errorf("no probes: %+v", e)
	}
}

// TestSchedLatenciesFromMetrics reads go_sched_latencies_seconds from a real
// /metrics page served with ragtime's collector, as ragtime and the relay serve it, and a
// histogram's shares over 1 and 10 ms from its buckets.
func TestSchedLatenciesFromMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.SchedLatencies())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	before, err := readHistogram(t.Context(), srv.Client(), srv.URL, schedLatencies)
	if err != nil {
		t.Fatal(err)
	}
	if len(before.upper) < 2 || !math.IsInf(before.upper[len(before.upper)-1], 1) {
		t.Fatalf("buckets %v", before.upper)
	}
	if d := before.since(before); d.count() != 0 {
		t.Errorf("a histogram since itself counts %d", d.count())
	}
	empty := httptest.NewServer(promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}))
	defer empty.Close()
	if _, err := readHistogram(t.Context(), empty.Client(), empty.URL, schedLatencies); err == nil || !strings.Contains(err.Error(), schedLatencies) {
		t.Errorf("a page without the histogram: %v, want an error naming it", err)
	}

	// 100 waits: 60 under 0.9 ms, 30 under 10.5 ms, 10 longer.
	w := &histogram{upper: []float64{0.000917504, 0.01048576, 0.117440512, math.Inf(1)}, cum: []float64{60, 90, 99, 100}}
	if share, bound := w.over(0.0009); share != 0.4 || bound != 0.000917504 {
		t.Errorf("over 0.9 ms: %v (bound %v), want 0.4", share, bound)
	}
	if share, _ := w.over(0.009); share != 0.1 {
		t.Errorf("over 10 ms: %v, want 0.1", share)
	}
	if got := w.String(); got != "40.0 % over 0.92 ms, 10.0 % over 10 ms" {
		t.Errorf("String() = %q", got)
	}
}

// TestCtxSwitchesCountsSleeps: a thread of this process that sleeps adds to
// its voluntary context switches, summed over its threads.
func TestCtxSwitchesCountsSleeps(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	v0, _ := ctxSwitches(os.Getpid())
	for range 20 {
		time.Sleep(time.Millisecond)
	}
	if v1, _ := ctxSwitches(os.Getpid()); v1 <= v0 {
		t.Errorf("voluntary context switches %d after 20 sleeps, %d before", v1, v0)
	}
	if v, n := ctxSwitches(0); v != 0 || n != 0 {
		t.Errorf("pid 0: %d, %d", v, n)
	}
}

// TestCPUMsOfCountsProcessesByCommand: the processes named as this one
// (its /proc/self/comm) have used at least this one's CPU; an unknown
// command none.
func TestCPUMsOfCountsProcessesByCommand(t *testing.T) {
	t.Parallel()
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for x := 0; cpuMs(os.Getpid()) == 0; x++ { // some CPU to count
		_ = strings.Repeat("x", x%1000)
	}
	if mine, all := cpuMs(os.Getpid()), cpuMsOf(strings.TrimSpace(string(comm))); all < mine {
		t.Errorf("cpuMsOf(%q) = %v ms, under this process's own %v", comm, all, mine)
	}
	if got := cpuMsOf("no-such-command-here"); got != 0 {
		t.Errorf("cpuMsOf(an unknown command) = %v, want 0", got)
	}
}

// TestFetchProfileWritesWhatTheProfilerSent: the profile is asked for over
// the given length and written whole; a profiler's refusal is an error
// naming its status, and neither it nor a profile cut short leaves a file.
func TestFetchProfileWritesWhatTheProfilerSent(t *testing.T) {
	t.Parallel()
	prof := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("seconds") == "4" { // cut short: fewer bytes than announced
			w.Header().Set("Content-Length", "100")
			w.Write([]byte("half a profile"))
			return
		}
		if r.URL.Path != "/debug/pprof/profile" || r.URL.Query().Get("seconds") != "2" {
			http.Error(w, "want /debug/pprof/profile?seconds=2, got "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Write([]byte("profile bytes"))
	}))
	t.Cleanup(prof.Close)
	dir := t.TempDir()
	file := filepath.Join(dir, "cpu.pprof")
	if err := fetchProfile(context.Background(), prof.URL+"/", 2*time.Second, file); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "profile bytes" {
		t.Errorf("profile file %q, %v", b, err)
	}
	bad := filepath.Join(dir, "bad.pprof")
	if err := fetchProfile(context.Background(), prof.URL, 3*time.Second, bad); err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Errorf("a refusal: %v, want HTTP 400 named", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a refused profile left %s (%v)", bad, err)
	}
	cut := filepath.Join(dir, "cut.pprof")
	if err := fetchProfile(context.Background(), prof.URL, 4*time.Second, cut); err == nil {
		t.Error("a profile cut short: no error")
	}
	if _, err := os.Stat(cut); !os.IsNotExist(err) {
		t.Errorf("a profile cut short left %s (%v)", cut, err)
	}
}

// TestWhereTTFTWent: the breakdown has a column per stage before the first
// token in ragtime's order, the medians of each column for the idle and the
// held probes, and the slowest held probes whole, with the time outside
// ragtime's clock as the client's TTFT minus ttft_ms.
func TestWhereTTFTWent(t *testing.T) {
	t.Parallel()
	ask := func(ttft, ttftMs, overhead, embed, prefill float64) askResult {
		e := stageMs{Name: "embed", DurationMs: embed}
		wait := embed - 1 // the embedder's part
		e.Attrs.ServerWaitMs = &wait
		return askResult{
			ttft: time.Duration(ttft * float64(time.Millisecond)), ttftMs: ttftMs, overheadMs: overhead,
			stages: []stageMs{{Name: "accept", DurationMs: 0.1}, e, {Name: "search", DurationMs: 0.2}, {Name: "llm_prefill", DurationMs: prefill}, {Name: "llm_decode", DurationMs: 900}},
		}
	}
	idle := []askResult{ask(24, 23, 0.5, 6, 16), ask(25, 24, 0.5, 7, 16), ask(26, 24, 0.7, 6, 17)}
	held := []askResult{ask(30, 28, 0.5, 8, 19), ask(90, 60, 3, 40, 16), ask(28, 27, 0.4, 7, 19), ask(50, 48, 1, 7, 39)}
	var b strings.Builder
	writeWhereTTFTWent(&b, idle, held, 2)
	out := b.String()
	for _, want := range []string{
		"| probes | TTFT | outside | overhead | accept | embed | embed: server wait | search | llm_prefill |\n",
		"| idle, median of each (3) | 25.0 | 1.0 | 0.5 | 0.1 | 6.0 | 5.0 | 0.2 | 16.0 |\n",
		"| held, median of each (4) | 30.0 | 2.0 | 0.5 | 0.1 | 7.0 | 6.0 | 0.2 | 19.0 |\n", // the nearest-rank median, as every p50 here
		"| held, slowest 1 | 90.0 | 30.0 | 3.0 | 0.1 | 40.0 | 39.0 | 0.2 | 16.0 |\n",
		"| held, slowest 2 | 50.0 | 2.0 | 1.0 | 0.1 | 7.0 | 6.0 | 0.2 | 39.0 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "llm_decode") || strings.Contains(out, "slowest 3") {
		t.Errorf("llm_decode (after the first token) or a third slowest in\n%s", out)
	}
	// The relay's answers carry no stages: nothing to break down.
	b.Reset()
	writeWhereTTFTWent(&b, []askResult{{ttft: time.Millisecond}}, nil, 3)
	if b.Len() != 0 {
		t.Errorf("answers without stages printed %q", b.String())
	}
}

func TestStreamsAreReadAsEvents(t *testing.T) {
	t.Parallel()
	bodies := map[string]string{
		"/ragtime": ": keep-alive\n\nevent: token\ndata: {\"text\":\"a\"}\n\nevent: token\r\ndata: {\"text\":\"b\"}\r\n\r\n" +
			"event: done\ndata: {\"ttft_ms\":12.5,\"overhead_ms\":1.5,\"stages\":[{\"name\":\"embed\",\"duration_ms\":3}]}\n\n",
		"/relay": "event: token\ndata: {\"text\":\"a\"}\n\nevent: done\ndata: {\"embed_ms\":2.25}\n\n",
		"/error": "event: error\ndata: {\"code\":\"llm_timeout\"}\n\n",
		"/cut":   "event: token\ndata: {\"text\":\"a\"}\n\n",
		"/notok": "event: done\ndata: {}\n\n",
		"/chat":  "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		path := r.URL.Path
		if path == "/chat/completions" {
			path = "/chat"
		}
		_, _ = w.Write([]byte(bodies[path]))
	}))
	defer srv.Close()
	ctx := context.Background()
	hc := srv.Client()

	tokens := 0
	a := askSSE(ctx, hc, srv.URL+"/ragtime", true, func() { tokens++ })
	if a.err != "" || a.ttft <= 0 || a.total < a.ttft || a.ttftMs != 12.5 || a.overheadMs != 1.5 || a.embedMs != 3 || len(a.stages) != 1 || tokens != 1 {
		t.Errorf("ragtime: %+v, first-token calls %d", a, tokens)
	}
	if a := askSSE(ctx, hc, srv.URL+"/relay", false, nil); a.err != "" || a.embedMs != 2.25 || a.ttft <= 0 {
		t.Errorf("relay: %+v", a)
	}
	if a := askSSE(ctx, hc, srv.URL+"/error", true, nil); a.err != "error event llm_timeout" {
		t.Errorf("error: %+v", a)
	}
	if a := askSSE(ctx, hc, srv.URL+"/cut", true, nil); a.err != "stream ended early: EOF" || a.ttft <= 0 {
		t.Errorf("cut short: %+v", a)
	}
	if a := askSSE(ctx, hc, srv.URL+"/notok", true, nil); a.err != "no token" {
		t.Errorf("done without a token: %+v", a)
	}
	if a := askSim(ctx, hc, srv.URL, "q", 4); a.err != "" || a.ttft <= 0 {
		t.Errorf("chat: %+v", a)
	}
	if a := askSSE(ctx, hc, srv.URL+"/missing", true, nil); a.err != "stream ended early: EOF" {
		t.Errorf("empty body: %+v", a)
	}
}
