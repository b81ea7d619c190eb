package sim

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkEngineStep measures the scheduler alone on a virtual clock: one
// op is one engine step over 2,000 decoding sequences.
func BenchmarkEngineStep(b *testing.B) {
	e := newBatchEngine(costs{overhead: 1, perToken: 0.01, itl: 20}, nil, 2048, 1)
	t := time.Unix(1_000_000, 0)
	for i := range 2000 {
		s := newSeq(t, 100, nil, 0, 1<<30)
		s.wake = make(chan struct{}, 1)
		_ = i
		e.add(s)
	}
	next := e.advance(t)
	b.ResetTimer()
	for b.Loop() {
		next = e.advance(next)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2000, "ns/token")
}

// BenchmarkSimulator streams 2,000 concurrent requests through real HTTP on
// loopback (clients included, on the same cores): one op is the whole run of
// 2,000 streams × 50 tokens at 20 ms ITL with continuous batching. It
// reports engine steps per second, process CPU per streamed token and the
// p99 of how late the driver woke past each step's modelled end.
// benchITL is the ITL of BenchmarkSimulator, in milliseconds.
var benchITL = func() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("LLMSIM_BENCH_ITL_MS"), 64); err == nil && v > 0 {
		return v
	}
	return 20
}()

func BenchmarkSimulator(b *testing.B) {
	const streams, tokensEach = 2000, 50
	s, ts := startSim(b, Config{MaxNumSeqs: 4096, PrefillMs: 50, PrefillMsPerToken: 0.01, ITLMs: benchITL, OutputTokens: tokensEach})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: streams}}
	body, _ := json.Marshal(chatBody(true, "a short question about prefill"))
	var cpu time.Duration
	var wall time.Duration
	for b.Loop() {
		ru0 := rusage()
		start := time.Now()
		var wg sync.WaitGroup
		var failed sync.Map
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
				if err != nil {
					failed.Store(err.Error(), true)
					return
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
				}
			}()
		}
		wg.Wait()
		wall += time.Since(start)
		cpu += rusage() - ru0
		failed.Range(func(k, _ any) bool { b.Fatal(k); return false })
	}
	st := s.Stats()
	tokens := float64(st.TokensSent)
	b.ReportMetric(float64(st.Steps)/wall.Seconds(), "steps/s")
	b.ReportMetric(float64(cpu.Microseconds())/tokens, "cpu-µs/token")
	b.ReportMetric(st.LagP99*1e3, "lag-p99-ms")
	b.ReportMetric(st.FirstTokenLagP99*1e3, "first-flush-lag-p99-ms")
}

func rusage() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFirstTokenAccuracy sends requests one at a time (no load) with a
// fixed 5 ms prefill and reports how far past the modelled time the first
// token reached the client: p50 and p99 of (client TTFT − 5 ms), which
// includes loopback and the client's own parsing. Run with -benchtime 1000x.
func BenchmarkFirstTokenAccuracy(b *testing.B) {
	s, ts := startSim(b, Config{PrefillMs: 5, OutputTokens: 1})
	body, _ := json.Marshal(chatBody(true, "how accurate is the first token"))
	client := &http.Client{Transport: &http.Transport{}}
	var excess []float64
	for b.Loop() {
		start := time.Now()
		resp, err := client.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			b.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				b.Fatal("stream ended before the first token")
			}
			if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
				excess = append(excess, float64(time.Since(start)-5*time.Millisecond)/1e6)
				break
			}
		}
		for {
			if _, err := br.ReadString('\n'); err != nil {
				break
			}
		}
		resp.Body.Close()
	}
	slices.Sort(excess)
	b.ReportMetric(excess[len(excess)/2], "late-p50-ms")
	b.ReportMetric(excess[min(len(excess)-1, len(excess)*99/100)], "late-p99-ms")
	b.ReportMetric(excess[0], "late-min-ms")
	b.ReportMetric(s.Stats().FirstTokenLagP99*1e3, "server-flush-lag-p99-ms")
}
