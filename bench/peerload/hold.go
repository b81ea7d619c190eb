package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// holdConfig is the -hold mode: N streams held open against ragtime (or
// the relay, the floor) while short probe asks measure the TTFT a newcomer
// sees.
type holdConfig struct {
	target      string // ragtime or relay
	streams     int    // streams held open
	probes      int    // probe asks, one at a time, idle and loaded
	probeTokens int    // answer length of a probe (its TTFT is what counts)
	// probeEvery spaces the probes' starts (a probe starts at once when
	// the one before it ends later): 100 probes at 150 ms span 15 s,
	// more than one held answer (64 tokens at 200 ms), so that they sample
	// every phase of the held streams' waves of re-asks instead of
	// whichever 2.5 s back-to-back probes happen to fall in. 0: back to back.
	probeEvery time.Duration
	ramp       time.Duration // time over which the held streams are opened
	limit      time.Duration // the whole run's bound
	// profile, when set, is the file for a CPU profile of the target taken
	// from its profiler at pprofURL for profileFor, from the first held
	// probe: the same phase of the run for ragtime and for the relay.
	profile, pprofURL string
	profileFor        time.Duration
}

// holdResult is what one -hold run measured.
type holdResult struct {
	idle, loaded []float64   // probe TTFTs, ms
	loadedAt     []time.Time // when each of loaded's probes started
	// idleAsks and loadedAsks are the probes' answers, for where their
	// TTFT went (ragtime's stages; nothing for the relay).
	idleAsks, loadedAsks []askResult
	heldStarts           []time.Time // when each held ask started
	heldAsks, heldErrs   int
	heldErrKinds         map[string]int
	heldTTFT             []float64 // the held streams' own TTFTs (a burst), ms
	openAtSample         int64     // median of the streams between first token and end while the probes ran
	rssIdleKB, rssHeldKB int64
	cpuMsPerSec          float64 // the target's CPU per second of wall time while the probes ran held
	simCPUMsPerSec       float64 // llmsim's, over the same time
	selfCPUMsPerSec      float64 // this load client's, over the same time
	pgCPUMsPerSec        float64 // every postgres process's, over the same time
	// sleepsPerSec and preemptsPerSec are the target's threads' voluntary
	// and nonvoluntary context switches per second over the same time.
	sleepsPerSec, preemptsPerSec float64
	// busySecond and medianSecond are the CPU the three processes (the
	// target, llmsim, this client) used together in their busiest second
	// and in the median second while the probes ran held (sliding 1 s
	// windows of the 200 ms samples): the waves of re-asks show in the
	// former, which the averages above flatten.
	busySecond, medianSecond float64
	// sched is how long the target's runnable goroutines waited to run
	// while the probes ran held (its go_sched_latencies_seconds), lag how
	// late llmsim's embedding answers woke past their modelled time; nil
	// when a /metrics page could not be read.
	sched, lag *histogram
}

// runHold opens cfg.streams streams against the hold target (each asks
// again when its answer ends, so that the count stays up), after measuring
// probe TTFTs on the idle server; once every stream has had its first token
// it samples the target's RSS and measures the probes again. Everything
// stops at hc.limit.
func runHold(cfg *config, hc *http.Client, out io.Writer) error {
	h := cfg.hold
	ctx, cancel := context.WithTimeout(context.Background(), h.limit)
	defer cancel()
	r := newHoldRun(cfg, hc)
	r.res.idle, _, r.res.idleAsks = r.probe(ctx)
	r.res.rssIdleKB = rssKB(r.pid)

	heldCtx, stopHeld := context.WithCancel(ctx)
	defer stopHeld()
	var wg sync.WaitGroup
	r.holdStreams(heldCtx, &wg)
	// Every stream has streamed a token: all are open at once.
	for r.started.Load() < int64(h.streams) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	r.measureHeld(ctx, out)
	stopHeld()
	wg.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("-hold: the run hit its %s limit", h.limit)
	}
	reportHold(out, cfg, r.res)
	return nil
}

// holdRun is one -hold run: its target and what it measured so far.
type holdRun struct {
	cfg     *config
	hc      *http.Client
	ragtime bool // the target is ragtime, not the relay
	pid     int  // the target's process
	res     holdResult
	// mu guards res's held-stream fields while the held streams run.
	mu sync.Mutex
	// open counts the streams past their first token and not ended;
	// started the held asks that had their first token.
	open, started atomic.Int64
}

func newHoldRun(cfg *config, hc *http.Client) *holdRun {
	r := &holdRun{cfg: cfg, hc: hc, ragtime: cfg.hold.target == "ragtime", pid: cfg.ragtimePID,
		res: holdResult{heldErrKinds: map[string]int{}}}
	if !r.ragtime {
		r.pid = cfg.relayPID
	}
	return r
}

// askURL is the target's /ask for question q, answered in tokens.
func (r *holdRun) askURL(q string, tokens int) string {
	if !r.ragtime {
		return fmt.Sprintf("%s/ask?q=%s&max_tokens=%d", r.cfg.relayURL, url.QueryEscape(q), tokens)
	}
	return fmt.Sprintf("%s/ask?q=%s&top_k=%d&rerank_top_n=0&max_tokens=%d", r.cfg.ragtimeURL, url.QueryEscape(q), r.cfg.topK, tokens)
}

// probe asks the probes one at a time (starting every probeEvery) and
// returns the TTFT (ms), start and answer of each that succeeded.
func (r *holdRun) probe(ctx context.Context) (ttfts []float64, at []time.Time, asks []askResult) {
	h := r.cfg.hold
	first := time.Now()
	for i := range h.probes {
		if wait := time.Until(first.Add(time.Duration(i) * h.probeEvery)); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		start := time.Now()
		a := askSSE(ctx, r.hc, r.askURL(questions[i%len(questions)], h.probeTokens), r.ragtime, nil)
		if a.err == "" {
			ttfts, at, asks = append(ttfts, ms(a.ttft)), append(at, start), append(asks, a)
		}
	}
	return ttfts, at, asks
}

// holdStreams opens the held streams over the ramp, each in a goroutine of
// wg that asks again when its answer ends, until heldCtx is done.
func (r *holdRun) holdStreams(heldCtx context.Context, wg *sync.WaitGroup) {
	h, res := r.cfg.hold, &r.res
	gap := h.ramp / time.Duration(max(h.streams, 1))
	for i := range h.streams {
		wg.Go(func() {
			for heldCtx.Err() == nil {
				r.mu.Lock()
				res.heldStarts = append(res.heldStarts, time.Now())
				r.mu.Unlock()
				a := askHeld(heldCtx, r.hc, r.askURL(questions[i%len(questions)], r.cfg.maxTokens), r.ragtime, &r.open, &r.started)
				if heldCtx.Err() != nil {
					return // stopped by the run, not the server's doing
				}
				r.mu.Lock()
				res.heldAsks++
				if a.err != "" {
					res.heldErrs++
					res.heldErrKinds[a.err]++
				} else {
					res.heldTTFT = append(res.heldTTFT, ms(a.ttft))
				}
				r.mu.Unlock()
			}
		})
		time.Sleep(gap)
	}
}

// measureHeld measures the probes again with the streams held, and while
// they run the target's RSS, the open streams, the processes' CPU and
// context switches, the target's scheduling latency and llmsim's lag, and
// the target's CPU profile when asked for.
func (r *holdRun) measureHeld(ctx context.Context, out io.Writer) {
	cfg, h, hc, pid, res := r.cfg, r.cfg.hold, r.hc, r.pid, &r.res
	stopSampling := r.sample()
	metricsURL := cfg.ragtimeURL + "/metrics"
	if !r.ragtime {
		metricsURL = cfg.relayURL + "/metrics"
	}
	sched := histogramBetween(ctx, hc, metricsURL, schedLatencies)
	lag := histogramBetween(ctx, hc, strings.TrimSuffix(cfg.simURL, "/v1")+"/metrics", answerLag)
	cpu0, sim0, self0, pg0, t0 := cpuMs(pid), cpuMs(cfg.simPID), cpuMs(os.Getpid()), cpuMsOf("postgres"), time.Now()
	vol0, nonvol0 := ctxSwitches(pid)
	profiled := make(chan error, 1)
	if h.profile != "" {
		go func() { profiled <- fetchProfile(ctx, h.pprofURL, h.profileFor, h.profile) }()
	} else {
		profiled <- nil
	}
	res.loaded, res.loadedAt, res.loadedAsks = r.probe(ctx)
	secs := time.Since(t0).Seconds()
	vol1, nonvol1 := ctxSwitches(pid)
	res.sleepsPerSec, res.preemptsPerSec = float64(vol1-vol0)/secs, float64(nonvol1-nonvol0)/secs
	res.cpuMsPerSec = (cpuMs(pid) - cpu0) / secs
	res.simCPUMsPerSec = (cpuMs(cfg.simPID) - sim0) / secs
	res.selfCPUMsPerSec = (cpuMs(os.Getpid()) - self0) / secs
	res.pgCPUMsPerSec = (cpuMsOf("postgres") - pg0) / secs
	var schedErr, lagErr error
	res.sched, schedErr = sched()
	res.lag, lagErr = lag()
	if err := errors.Join(schedErr, lagErr); err != nil {
		fmt.Fprintf(out, "(not reported: %v)\n", err)
	}
	if err := <-profiled; err != nil { // the streams stay held until the profile ends
		fmt.Fprintf(out, "(no profile: %v)\n", err)
	} else if h.profile != "" {
		fmt.Fprintf(out, "CPU profile of %s over %s from the first held probe: %s (go tool pprof -top -cum <its binary> %s)\n", h.target, h.profileFor, h.profile, h.profile)
	}
	rss, opened, cpuTotal := stopSampling()
	res.rssHeldKB, res.openAtSample = int64(pct(rss, 50)), int64(pct(opened, 50))
	res.busySecond, res.medianSecond = busiestSecond(cpuTotal, 5)
}

// sample samples the target's RSS, the open streams and the three
// processes' CPU (the target, llmsim, this client) every 200 ms until
// stopped, and returns what it sampled then. The median of the first two
// is reported (the peak right after the ramp holds the garbage of 2,000
// retrievals not yet collected).
func (r *holdRun) sample() (stop func() (rss, opened, cpuTotal []float64)) {
	pid, simPID := r.pid, r.cfg.simPID
	var rss, opened, cpuTotal []float64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			rss = append(rss, float64(rssKB(pid)))
			opened = append(opened, float64(r.open.Load()))
			cpuTotal = append(cpuTotal, cpuMs(pid)+cpuMs(simPID)+cpuMs(os.Getpid()))
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	return func() ([]float64, []float64, []float64) {
		close(stopSampling)
		<-sampled
		return rss, opened, cpuTotal
	}
}

// askHeld is askSSE for a held stream: it counts the stream open from its
// first token to its end.
func askHeld(ctx context.Context, hc *http.Client, u string, ragtime bool, open, started *atomic.Int64) askResult {
	opened := false
	a := askSSE(ctx, hc, u, ragtime, func() {
		opened = true
		open.Add(1)
		started.Add(1)
	})
	if opened {
		open.Add(-1)
	}
	return a
}

func reportHold(w io.Writer, cfg *config, r holdResult) {
	h := cfg.hold
	fmt.Fprintf(w, "\n## %d streams held open against %s (%d-token answers), probes of %d tokens one at a time\n\n", h.streams, h.target, cfg.maxTokens, h.probeTokens)
	fmt.Fprintf(w, "| | probes | TTFT p50 ms | TTFT p99 ms | %s RSS MB |\n", h.target)
	fmt.Fprintln(w, "|---|---|---|---|---|")
	fmt.Fprintf(w, "| idle | %d | %.1f | %.1f | %.0f |\n", len(r.idle), pct(r.idle, 50), pct(r.idle, 99), float64(r.rssIdleKB)/1024)
	fmt.Fprintf(w, "| %d held | %d | %.1f | %.1f | %.0f |\n", h.streams, len(r.loaded), pct(r.loaded, 50), pct(r.loaded, 99), float64(r.rssHeldKB)/1024)
	fmt.Fprintf(w, "\nprobe TTFT p99 with the streams held: %.2f× the idle p99\n", pct(r.loaded, 99)/pct(r.idle, 99))
	fmt.Fprintf(w, "RSS per open stream: (median RSS during the probes %.0f − idle %.0f MB) / %d streams open (median) = %.1f KB\n",
		float64(r.rssHeldKB)/1024, float64(r.rssIdleKB)/1024, r.openAtSample, float64(r.rssHeldKB-r.rssIdleKB)/float64(max(r.openAtSample, 1)))
	fmt.Fprintf(w, "%s CPU while the streams were held: %.0f ms per second (llmsim %.0f, this load client %.0f, PostgreSQL %.0f; the machine has %d cores)\n",
		h.target, r.cpuMsPerSec, r.simCPUMsPerSec, r.selfCPUMsPerSec, r.pgCPUMsPerSec, runtime.NumCPU())
	fmt.Fprintf(w, "CPU of the three together, per second while the probes ran held: median %.0f ms, busiest %.0f ms (of %d)\n",
		r.medianSecond, r.busySecond, 1000*runtime.NumCPU())
	fmt.Fprintf(w, "%s's threads while the probes ran held: %.0f sleeps a second (voluntary context switches), %.0f taken off the CPU by the kernel (nonvoluntary)\n",
		h.target, r.sleepsPerSec, r.preemptsPerSec)
	if s := r.sched; s != nil {
		fmt.Fprintf(w, "%s's runnable goroutines, waiting to run while the probes ran held (go_sched_latencies_seconds, %d sampled waits): %s\n",
			h.target, s.count(), s)
	}
	if l := r.lag; l != nil {
		fmt.Fprintf(w, "llmsim's embedding answers, late past their modelled time while the probes ran held (%s, %d answers): %s\n",
			answerLag, l.count(), l)
	}
	if wv := splitByWaves(r.loadedAt, r.loaded, r.heldStarts); len(wv.in)+len(wv.out) > 0 {
		fmt.Fprintf(w, "probes started in a wave of re-asks (held asks starting, in the second around the probe, over twice their mean of %.0f a second while the probes ran): %d, TTFT p50 %.1f ms, slowest %.1f; the other %d: p50 %.1f ms, slowest %.1f\n",
			wv.meanRate, len(wv.in), pct(wv.in, 50), slowest(wv.in), len(wv.out), pct(wv.out, 50), slowest(wv.out))
	}
	if h.target == "ragtime" {
		writeWhereTTFTWent(w, r.idleAsks, r.loadedAsks, 3)
	}
	fmt.Fprintf(w, "held streams: %d answers ended, %d errors; their own TTFT (opened over %s) p50 %.1f ms, p99 %.1f ms\n",
		r.heldAsks, r.heldErrs, h.ramp, pct(r.heldTTFT, 50), pct(r.heldTTFT, 99))
	for k, n := range r.heldErrKinds {
		fmt.Fprintf(w, "held stream errors: %s ×%d\n", k, n)
	}
}

// writeWhereTTFTWent prints where the probes' TTFT went, in ms: the
// client's TTFT; the part of it outside ragtime's clock (client TTFT −
// ttft_ms: this client, the kernel and the loopback between them);
// ragtime's overhead_ms (its time between stages); and each stage before
// the first token (llm_decode comes after it), with the upstream's part of
// a call's stage (its server_wait_ms: the request written to the answer's
// first byte at ragtime's socket) beside it. The idle and the held
// probes each get a row of every column's median, and the slowest held
// probes a row each, whole, so that a held p99 over the idle one shows
// which part grew.
func writeWhereTTFTWent(w io.Writer, idle, held []askResult, slowestN int) {
	// The stages in the order ragtime ran them, each followed by the part
	// of it that was the upstream's (its server_wait_ms) when it has one.
	var stages []string
	const serverWait = ": server wait"
	for _, a := range slices.Concat(idle, held) {
		for _, s := range a.stages {
			if s.Name == "llm_decode" {
				continue
			}
			if !slices.Contains(stages, s.Name) {
				stages = append(stages, s.Name)
			}
			if s.Attrs.ServerWaitMs != nil && !slices.Contains(stages, s.Name+serverWait) {
				stages = slices.Insert(stages, slices.Index(stages, s.Name)+1, s.Name+serverWait)
			}
		}
	}
	if len(stages) == 0 {
		return // no done event carried stages
	}
	columns := func(a askResult) []float64 {
		c := make([]float64, 3+len(stages))
		c[0], c[1], c[2] = ms(a.ttft), ms(a.ttft)-a.ttftMs, a.overheadMs
		for _, s := range a.stages {
			if i := slices.Index(stages, s.Name); i >= 0 {
				c[3+i] += s.DurationMs // a stage run twice counts twice
			}
			if i := slices.Index(stages, s.Name+serverWait); i >= 0 && s.Attrs.ServerWaitMs != nil {
				c[3+i] += *s.Attrs.ServerWaitMs
			}
		}
		return c
	}
	row := func(label string, c []float64) {
		fmt.Fprintf(w, "| %s |", label)
		for _, v := range c {
			fmt.Fprintf(w, " %.1f |", v)
		}
		fmt.Fprintln(w)
	}
	medians := func(asks []askResult) []float64 {
		rows := make([][]float64, len(asks))
		for k, a := range asks {
			rows[k] = columns(a)
		}
		out := make([]float64, 3+len(stages))
		col := make([]float64, len(asks))
		for i := range out {
			for k, r := range rows {
				col[k] = r[i]
			}
			out[i] = pct(col, 50) // pct sorts a copy
		}
		return out
	}
	fmt.Fprintf(w, "\nwhere the probes' TTFT went, ms (outside: the client's TTFT − ragtime's ttft_ms, time ragtime's clock does not see; overhead: ragtime's overhead_ms, between its stages)\n\n")
	fmt.Fprintf(w, "| probes | TTFT | outside | overhead | %s |\n", strings.Join(stages, " | "))
	fmt.Fprintf(w, "|---|---|---|---|%s\n", strings.Repeat("---|", len(stages)))
	if len(idle) > 0 {
		row(fmt.Sprintf("idle, median of each (%d)", len(idle)), medians(idle))
	}
	if len(held) > 0 {
		row(fmt.Sprintf("held, median of each (%d)", len(held)), medians(held))
	}
	byTTFT := slices.Clone(held)
	slices.SortStableFunc(byTTFT, func(a, b askResult) int { return cmp.Compare(b.ttft, a.ttft) })
	for i, a := range byTTFT[:min(slowestN, len(byTTFT))] {
		row(fmt.Sprintf("held, slowest %d", i+1), columns(a))
	}
	fmt.Fprintln(w)
}

// busiestSecond returns the largest and the median increase of cum (a
// cumulative CPU time in ms, sampled every 1/per of a second) over a
// sliding window of per samples: CPU ms per second.
func busiestSecond(cum []float64, per int) (busiest, median float64) {
	var secs []float64
	for i := per; i < len(cum); i++ {
		secs = append(secs, cum[i]-cum[i-per])
	}
	if len(secs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Max(secs), pct(secs, 50)
}

// waves is splitByWaves' answer: the probe TTFTs (ms) of the probes that
// started in a wave of held re-asks and of the others, and the held asks'
// mean start rate per second over the probes' span.
type waves struct {
	in, out  []float64
	meanRate float64
}

// splitByWaves splits probes (ttfts[i] started at at[i]) by whether they
// started in a wave of the held streams' re-asks: more than twice the
// held asks' mean start rate over the probes' span (askStarts, in any
// order) in the second centred on the probe's start.
func splitByWaves(at []time.Time, ttfts []float64, askStarts []time.Time) waves {
	var w waves
	if len(at) == 0 || len(at) != len(ttfts) {
		return w
	}
	starts := slices.Clone(askStarts)
	slices.SortFunc(starts, time.Time.Compare)
	from, to := slices.MinFunc(at, time.Time.Compare), slices.MaxFunc(at, time.Time.Compare)
	startedIn := func(a, b time.Time) int { // asks started in [a, b)
		i, _ := slices.BinarySearchFunc(starts, a, time.Time.Compare)
		j, _ := slices.BinarySearchFunc(starts, b, time.Time.Compare)
		return j - i
	}
	const half = time.Second / 2
	// The mean over the probes' windows end to end: from half a second
	// before the first probe to half a second after the last.
	w.meanRate = float64(startedIn(from.Add(-half), to.Add(half))) / (to.Sub(from) + 2*half).Seconds()
	for i, t := range at {
		if float64(startedIn(t.Add(-half), t.Add(half))) > 2*w.meanRate {
			w.in = append(w.in, ttfts[i])
		} else {
			w.out = append(w.out, ttfts[i])
		}
	}
	return w
}

// slowest is the largest of ms, NaN when there is none.
func slowest(ms []float64) float64 {
	if len(ms) == 0 {
		return math.NaN()
	}
	return slices.Max(ms)
}

// fetchProfile writes the CPU profile the Go profiler at root
// (/debug/pprof/profile) takes over d to file.
func fetchProfile(ctx context.Context, root string, d time.Duration, file string) error {
	secs := int(d.Round(time.Second) / time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimRight(root, "/"), secs), nil)
	if err != nil {
		return fmt.Errorf("profiling: %w", err)
	}
	// The profiler answers after d: the client's own timeout must not cut it.
	resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("profiling: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("profiling: %s answered HTTP %d: %s", req.URL, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("profiling: %w", err)
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(file) // no half a profile
		return fmt.Errorf("profiling: writing %s: %w", file, err)
	}
	return nil
}
