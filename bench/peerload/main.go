package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"ragtime/internal/sse"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peerload:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	simURL, ragtimeURL, peerURL, relayURL string
	simPID, ragtimePID, peerPID, relayPID int
	concurrency                           []int
	rounds                                int
	perStream, minAsks                    int // asks per trial: max(minAsks, perStream × streams)
	trialTimeout                          time.Duration
	stagger                               time.Duration // a trial's streams start spread evenly over this span (0: all at once)
	maxTokens, topK                       int
	embedModelMs                          float64
	targets                               []string // which services run: llmsim always, ragtime, peer, relay
	hold                                  holdConfig
}

// has reports whether target name runs.
func (c *config) has(name string) bool { return slices.Contains(c.targets, name) }

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("peerload", flag.ContinueOnError)
	c := &config{}
	var conc, targets string
	fs.StringVar(&c.simURL, "sim", "", "the simulator's OpenAI base URL (http://127.0.0.1:PORT/v1)")
	fs.StringVar(&c.ragtimeURL, "ragtime", "", "ragtime's root URL (http://127.0.0.1:PORT)")
	fs.StringVar(&c.peerURL, "peer", "", "the LangChain.js peer's root URL (http://127.0.0.1:PORT)")
	fs.IntVar(&c.simPID, "sim-pid", 0, "the simulator's process id (CPU and RSS)")
	fs.IntVar(&c.ragtimePID, "ragtime-pid", 0, "ragtime's process id")
	fs.IntVar(&c.peerPID, "peer-pid", 0, "the peer's process id")
	fs.StringVar(&c.relayURL, "relay", "", "bench/relay's root URL (http://127.0.0.1:PORT): the floor, two upstream calls and one read and one write per token")
	fs.IntVar(&c.relayPID, "relay-pid", 0, "the relay's process id")
	fs.StringVar(&targets, "targets", "llmsim,ragtime,peer,relay", "services to load, comma-separated: llmsim (the baseline, always run), ragtime, peer, relay")
	fs.StringVar(&conc, "concurrency", "1,10,100", "concurrent streams per trial, comma-separated")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds; each runs every target at every concurrency, targets alternating")
	fs.IntVar(&c.perStream, "asks-per-stream", 3, "asks each stream makes in a trial, one after another")
	fs.IntVar(&c.minAsks, "min-asks", 30, "fewest asks in a trial (low concurrency: the streams ask more times)")
	fs.DurationVar(&c.stagger, "stagger", 0, "start a trial's streams spread evenly over this span instead of all at once (e.g. 335ms, one answer's length: asks then arrive steadily, not in waves of N)")
	fs.DurationVar(&c.trialTimeout, "trial-timeout", 90*time.Second, "longest a trial may run before its streams are cancelled")
	fs.IntVar(&c.maxTokens, "max-tokens", 64, "answer length in tokens")
	fs.IntVar(&c.topK, "top-k", 4, "chunks retrieved per ask (ragtime's top_k; the peer is started with the same)")
	fs.Float64Var(&c.embedModelMs, "embed-model-ms", 5.5, "the simulator's modelled latency of one one-text embedding, in ms (embed-ms + embed-ms-per-input)")
	fs.IntVar(&c.hold.streams, "hold", 0, "instead of trials: hold this many streams open against ragtime and measure probe asks' TTFT against the idle server's, and RSS per open stream")
	fs.StringVar(&c.hold.target, "hold-target", "ragtime", "-hold: the service whose streams are held and probed: ragtime, or relay (the floor, for comparison)")
	fs.IntVar(&c.hold.probes, "hold-probes", 100, "-hold: probe asks, one at a time, idle and with the streams held (100: the p99 is the second slowest, not one late wake-up)")
	fs.IntVar(&c.hold.probeTokens, "hold-probe-tokens", 4, "-hold: answer length of a probe")
	fs.DurationVar(&c.hold.probeEvery, "hold-probe-every", 150*time.Millisecond, "-hold: time between the probes' starts (150ms: 100 probes span 15 s, more than one held answer at 200 ms a token, so that they sample every phase of the held streams' re-asks); 0: back to back")
	fs.DurationVar(&c.hold.ramp, "hold-ramp", 5*time.Second, "-hold: time over which the held streams are opened")
	fs.DurationVar(&c.hold.limit, "hold-limit", 10*time.Minute, "-hold: bound of the whole run (100 probes at a loaded server's TTFT can take minutes)")
	fs.StringVar(&c.hold.profile, "hold-profile", "", "-hold: write a CPU profile of the held target, taken while the probes run, to this file (needs -hold-pprof)")
	fs.StringVar(&c.hold.pprofURL, "hold-pprof", "", "-hold: the held target's profiler root on loopback (http://127.0.0.1:6060: ragtime serve --pprof-addr, or bench/relay's)")
	fs.DurationVar(&c.hold.profileFor, "hold-profile-for", 10*time.Second, "-hold: the profile's length, from the first held probe (10s: within 100 probes' 15 s)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.hold.streams < 0 || c.hold.streams > 10000 || c.hold.probes < 1 || c.hold.probes > 10000 || c.hold.probeTokens < 1 || c.hold.probeEvery < 0 {
		return nil, fmt.Errorf("-hold must be 0 to 10000, -hold-probes 1 to 10000, -hold-probe-tokens at least 1 and -hold-probe-every not negative")
	}
	if c.hold.target != "ragtime" && c.hold.target != "relay" {
		return nil, fmt.Errorf("-hold-target must be ragtime or relay, got %q", c.hold.target)
	}
	if (c.hold.profile == "") != (c.hold.pprofURL == "") {
		return nil, fmt.Errorf("-hold-profile and -hold-pprof go together: the file and the profiler it reads")
	}
	if c.hold.pprofURL != "" {
		if p, err := url.Parse(c.hold.pprofURL); err != nil || p.Scheme != "http" || !loopback(p.Hostname()) {
			return nil, fmt.Errorf("-hold-pprof must be an http URL on loopback, got %q", c.hold.pprofURL)
		}
		if c.hold.profileFor < time.Second || c.hold.profileFor > time.Minute {
			return nil, fmt.Errorf("-hold-profile-for must be 1s to 1m, got %s", c.hold.profileFor)
		}
	}
	c.targets = []string{"llmsim"}
	for t := range strings.SplitSeq(targets, ",") {
		switch t = strings.TrimSpace(t); t {
		case "llmsim":
		case "ragtime", "peer", "relay":
			c.targets = append(c.targets, t)
		default:
			return nil, fmt.Errorf("-targets: %q is not one of llmsim, ragtime, peer, relay", t)
		}
	}
	for _, u := range []struct{ name, target, v string }{{"-sim", "llmsim", c.simURL}, {"-ragtime", "ragtime", c.ragtimeURL}, {"-peer", "peer", c.peerURL}, {"-relay", "relay", c.relayURL}} {
		if !c.has(u.target) {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || p.Scheme != "http" || !loopback(p.Hostname()) {
			return nil, fmt.Errorf("%s must be an http URL on loopback, got %q", u.name, u.v)
		}
	}
	for s := range strings.SplitSeq(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 5000 {
			return nil, fmt.Errorf("-concurrency: %q is not a number from 1 to 5000", s)
		}
		c.concurrency = append(c.concurrency, n)
	}
	if c.stagger < 0 || c.stagger > 10*time.Second {
		return nil, fmt.Errorf("-stagger must be 0 to 10s, got %s", c.stagger)
	}
	if c.rounds < 1 || c.rounds > 20 {
		return nil, fmt.Errorf("-rounds must be 1 to 20, got %d", c.rounds)
	}
	if c.perStream < 1 || c.perStream > 1000 || c.minAsks < 1 || c.minAsks > 100000 {
		return nil, fmt.Errorf("-asks-per-stream must be 1 to 1000 and -min-asks 1 to 100000, got %d and %d", c.perStream, c.minAsks)
	}
	return c, nil
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// target is one service under load.
type target struct {
	name string
	pid  int
	ask  func(ctx context.Context, hc *http.Client, q string) askResult
}

// askResult is what one ask observed.
type askResult struct {
	ttft    time.Duration // request sent → first answer token read
	total   time.Duration
	err     string  // "" when the stream ended well
	ttftMs  float64 // ragtime's own ttft_ms (0 otherwise)
	embedMs float64 // ragtime's embed stage (-1 when absent)
	// overheadMs and stages are ragtime's overhead_ms and stages from
	// its done event, in its order (nil for the other targets).
	overheadMs float64
	stages     []stageMs
}

// stageMs is one stage of ragtime's done event.
type stageMs struct {
	Name       string  `json:"name"`
	DurationMs float64 `json:"duration_ms"`
	Attrs      struct {
		ServerWaitMs *float64 `json:"server_wait_ms"` // a remote call's: request written → first response byte
	} `json:"attrs"`
}

// trial is one target at one concurrency in one round.
type trial struct {
	asks, errs     int
	errKinds       map[string]int
	ttft, gap, emb []float64 // ms
	wall           time.Duration
	cpuMs          float64 // process CPU over the trial
	rssKB          int64   // peak RSS sampled during the trial
	idleKB         int64   // RSS just before the trial
	timeWait       int     // new TIME_WAIT sockets towards the simulator
	writes         int64   // the process's write system calls over the trial
}

var questions = []string{
	"What does a reused keep-alive connection skip?",
	"Why does the first token take long with a long prompt?",
	"What is the prefill stage and what makes it slow?",
	"How does ragtime measure time to first token?",
	"What does the rerank stage do?",
	"Why does decode speed not change TTFT?",
}

func run(args []string, out io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	maxConc := max(slices.Max(cfg.concurrency), cfg.hold.streams+1)
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: maxConc * 3, MaxIdleConnsPerHost: maxConc, MaxConnsPerHost: 0,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true,
	}}
	if cfg.hold.streams > 0 {
		if !cfg.has(cfg.hold.target) {
			return fmt.Errorf("-hold-target %s must be among -targets", cfg.hold.target)
		}
		return runHold(cfg, hc, out)
	}
	simPort := portOf(cfg.simURL)
	targets := []target{
		{name: "llmsim", pid: cfg.simPID, ask: func(ctx context.Context, hc *http.Client, q string) askResult {
			return askSim(ctx, hc, cfg.simURL, q, cfg.maxTokens)
		}},
		{name: "ragtime", pid: cfg.ragtimePID, ask: func(ctx context.Context, hc *http.Client, q string) askResult {
			return askSSE(ctx, hc, fmt.Sprintf("%s/ask?q=%s&top_k=%d&rerank_top_n=0&max_tokens=%d", cfg.ragtimeURL, url.QueryEscape(q), cfg.topK, cfg.maxTokens), true, nil)
		}},
		{name: "peer", pid: cfg.peerPID, ask: func(ctx context.Context, hc *http.Client, q string) askResult {
			return askSSE(ctx, hc, cfg.peerURL+"/ask?q="+url.QueryEscape(q), false, nil)
		}},
		{name: "relay", pid: cfg.relayPID, ask: func(ctx context.Context, hc *http.Client, q string) askResult {
			return askSSE(ctx, hc, cfg.relayURL+"/ask?q="+url.QueryEscape(q), false, nil)
		}},
	}
	targets = slices.DeleteFunc(targets, func(t target) bool { return !cfg.has(t.name) })
	// Warm every target (connections, JIT, caches) before measuring.
	for _, t := range targets {
		warm := runTrial(cfg, hc, t, min(10, maxConc), 20, simPort)
		if warm.errs == warm.asks {
			return fmt.Errorf("%s answered no warm-up ask: %v", t.name, warm.errKinds)
		}
	}
	results := map[string]map[int][]trial{}
	for _, t := range targets {
		results[t.name] = map[int][]trial{}
	}
	for r := range cfg.rounds {
		for _, c := range cfg.concurrency {
			// Alternate the order per round so no target always runs first.
			for i := range targets {
				t := targets[(i+r)%len(targets)]
				tr := runTrial(cfg, hc, t, c, max(cfg.minAsks, cfg.perStream*c), simPort)
				results[t.name][c] = append(results[t.name][c], tr)
				fmt.Fprintf(os.Stderr, "round %d c=%d %-7s %4d asks %3d errors in %6.2fs\n", r+1, c, t.name, tr.asks, tr.errs, tr.wall.Seconds())
			}
		}
	}
	report(out, cfg, results)
	return nil
}

// runTrial runs asks over c concurrent streams (each stream asks again
// when its answer ended) and measures the target's process meanwhile.
func runTrial(cfg *config, hc *http.Client, t target, c, asks int, simPort int) trial {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.trialTimeout)
	defer cancel()
	before := timeWaitTo(simPort)
	cpu0 := cpuMs(t.pid)
	writes0 := writeCalls(t.pid)
	idle := rssKB(t.pid)
	var peak int64
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := rssKB(t.pid); r > peak {
				peak = r
			}
			select {
			case <-stopRSS:
				return
			case <-tick.C:
			}
		}
	}()
	var mu sync.Mutex
	res := trial{errKinds: map[string]int{}}
	next := make(chan int, asks)
	for i := range asks {
		next <- i
	}
	close(next)
	start := time.Now()
	var wg sync.WaitGroup
	for k := range c {
		wg.Go(func() {
			if cfg.stagger > 0 {
				select {
				case <-time.After(time.Duration(k) * cfg.stagger / time.Duration(c)):
				case <-ctx.Done():
					return
				}
			}
			for i := range next {
				if ctx.Err() != nil {
					return
				}
				a := t.ask(ctx, hc, questions[i%len(questions)])
				mu.Lock()
				res.asks++
				if a.err != "" {
					res.errs++
					res.errKinds[a.err]++
				} else {
					res.ttft = append(res.ttft, ms(a.ttft))
					if a.ttftMs > 0 {
						res.gap = append(res.gap, ms(a.ttft)-a.ttftMs)
					}
					if a.embedMs >= 0 {
						res.emb = append(res.emb, a.embedMs)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	res.cpuMs = cpuMs(t.pid) - cpu0
	res.writes = writeCalls(t.pid) - writes0
	close(stopRSS)
	<-rssDone
	res.rssKB = peak
	res.idleKB = idle
	if t.name == "ragtime" {
		res.timeWait = newTimeWait(before, timeWaitTo(simPort))
	}
	return res
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// askSim streams one chat completion straight from the simulator.
func askSim(ctx context.Context, hc *http.Client, base, q string, maxTokens int) askResult {
	body, _ := json.Marshal(map[string]any{
		"model": "sim", "stream": true, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": q}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return askResult{err: err.Error(), embedMs: -1}
	}
	req.Header.Set("Content-Type", "application/json")
	return stream(hc, req, func(event string, data []byte, a *askResult) (token, done bool) {
		if string(data) == "[DONE]" {
			return false, true
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &chunk) != nil {
			a.err = "bad chunk"
			return false, true
		}
		return len(chunk.Choices) > 0 && chunk.Choices[0].Delta.Content != "", false
	})
}

// askSSE streams one answer from ragtime's or the peer's /ask: token
// events, then done (or error). firstToken, when not nil, is called at the
// first token event.
func askSSE(ctx context.Context, hc *http.Client, u string, ragtime bool, firstToken func()) askResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return askResult{err: err.Error(), embedMs: -1}
	}
	return stream(hc, req, func(event string, data []byte, a *askResult) (token, done bool) {
		switch event {
		case "token":
			if firstToken != nil && a.ttft == 0 {
				firstToken()
			}
			return true, false
		case "error":
			var e struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(data, &e)
			a.err = "error event " + e.Code
			return false, true
		case "done":
			var relay struct {
				EmbedMs *float64 `json:"embed_ms"`
			}
			if !ragtime && json.Unmarshal(data, &relay) == nil && relay.EmbedMs != nil {
				a.embedMs = *relay.EmbedMs // bench/relay's embedding call
			}
			if ragtime {
				var d struct {
					TTFTMs     float64   `json:"ttft_ms"`
					OverheadMs float64   `json:"overhead_ms"`
					Stages     []stageMs `json:"stages"`
				}
				if json.Unmarshal(data, &d) == nil {
					a.ttftMs, a.overheadMs, a.stages = d.TTFTMs, d.OverheadMs, d.Stages
					for _, s := range d.Stages {
						if s.Name == "embed" {
							a.embedMs = s.DurationMs
						}
					}
				}
			}
			return false, true
		}
		return false, false
	})
}

// stream sends req and reads its SSE body, calling on for every event; the
// first event on reports as a token stamps the TTFT.
func stream(hc *http.Client, req *http.Request, on func(event string, data []byte, a *askResult) (token, done bool)) askResult {
	a := askResult{embedMs: -1}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		a.err = errKind(err)
		return a
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		a.err = "HTTP " + strconv.Itoa(resp.StatusCode)
		return a
	}
	rd := sse.Reader{Handle: func(event string, data []byte, at time.Time) (bool, error) {
		token, done := on(event, data, &a)
		if token && a.ttft == 0 {
			a.ttft = at.Sub(start)
		}
		if done {
			a.total = time.Since(start)
		}
		return done, nil
	}}
	done, err := rd.Run(resp.Body)
	switch {
	case err != nil && a.err == "":
		a.err = "stream ended early: " + errKind(err)
	case !done && a.err == "":
		a.err = "stream ended early: EOF"
	case done:
		if a.err == "" && a.ttft == 0 {
			a.err = "no token"
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	}
	return a
}

func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "trial timeout"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

func portOf(u string) int {
	p, _ := url.Parse(u)
	n, _ := strconv.Atoi(p.Port())
	return n
}
