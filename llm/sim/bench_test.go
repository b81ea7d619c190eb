package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
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

// BenchmarkSimulator streams 2,000 concurrent requests × 50 tokens through
// real HTTP on loopback with continuous batching; one op is one such run.
// Two cost models:
//
//   - batch-cost: the flag defaults' decode cost, 15 ms at batch 1 plus
//     0.05 ms per further sequence (about 115 ms per step at batch 2,000,
//     what a 7B model on one A100 takes; docs/llmsim.md);
//   - itl-20ms: a fixed 20 ms step whatever the batch, 100,000 tokens/s.
//
// And peer-100, make bench-peer's simulator at its 100 streams: 100
// requests × 64 tokens at once, each on its own timeline (no batching),
// 15 ms prefill and 5 ms per token; it also reports the server's CPU per
// request (server-cpu-ms/ask), bench-peer's llmsim column.
//
// The clients run in a child process (this test binary re-executed, see
// TestMain) so the server's CPU is measured apart from theirs; with
// LLMSIM_BENCH_CLIENT=inprocess they run in the benchmark's process as
// goroutines instead, and cpu-µs/token counts both. It reports steps per
// second, CPU per streamed token (server, client), the p99 of the
// scheduler's lag (how late the driver woke past each due step), of the
// writers' lag (how late each write left after its oldest token's modelled
// release) and of the first token's flush, and tokens per write (above 1
// when writers fell behind and coalesced).
func BenchmarkSimulator(b *testing.B) {
	base := Config{MaxNumSeqs: 4096, PrefillMs: 50, PrefillMsPerToken: 0.01, OutputTokens: benchTokens}
	batch := base
	batch.ITLMs, batch.ITLMsPerSeq = DefaultConfig().ITLMs, DefaultConfig().ITLMsPerSeq
	fixed := base
	fixed.ITLMs = 20
	b.Run("batch-cost", func(b *testing.B) { benchStreams(b, batch, benchStreams2000) })
	b.Run("itl-20ms", func(b *testing.B) { benchStreams(b, fixed, benchStreams2000) })
	// make bench-peer's simulator: every request on its own timeline, 15 ms
	// prefill, 5 ms per token, 64 tokens, 100 streams at once
	peer := Config{PrefillMs: 15, ITLMs: 5, OutputTokens: 64}
	b.Run("peer-100", func(b *testing.B) { benchStreams(b, peer, 100) })
}

const benchStreams2000, benchTokens = 2000, 50

func benchStreams(b *testing.B, cfg Config, streams int) {
	s, ts := startSim(b, cfg)
	body, _ := json.Marshal(chatBody(true, "a short question about prefill"))
	inProcess := os.Getenv("LLMSIM_BENCH_CLIENT") == "inprocess"
	var client *http.Client
	if inProcess {
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchStreams2000, MaxConnsPerHost: benchStreams2000}}
	}
	var cpu, clientCPU, wall time.Duration
	var steady steadyLag
	for b.Loop() {
		ru0 := rusage()
		start := time.Now()
		stop := steady.watch(s, streams)
		if inProcess {
			if err := streamConcurrently(client, ts.URL, body, streams); err != nil {
				b.Fatal(err)
			}
		} else {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), benchClientURL+"="+ts.URL, benchClientStreams+"="+strconv.Itoa(streams))
			out, err := cmd.CombinedOutput()
			if err != nil {
				b.Fatalf("client process: %v\n%s", err, out)
			}
			clientCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		wall += time.Since(start)
		cpu += rusage() - ru0
		stop()
	}
	st := s.Stats()
	tokens := float64(st.TokensSent)
	if want := float64(b.N * streams * cfg.OutputTokens); tokens != want {
		b.Fatalf("%g tokens streamed, want %g", tokens, want)
	}
	b.ReportMetric(float64(st.Steps)/wall.Seconds(), "steps/s")
	b.ReportMetric(tokens/wall.Seconds(), "tokens/s")
	if inProcess {
		b.ReportMetric(float64(cpu.Microseconds())/tokens, "cpu-µs/token")
	} else {
		b.ReportMetric(float64(cpu.Microseconds())/tokens, "server-cpu-µs/token")
		b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N*streams), "server-cpu-ms/ask")
		b.ReportMetric(float64(clientCPU.Microseconds())/tokens, "client-cpu-µs/token")
	}
	b.ReportMetric(st.LagP99*1e3, "sched-lag-p99-ms")
	b.ReportMetric(st.WriterLagP99*1e3, "writer-lag-p99-ms")
	b.ReportMetric(bucketQuantile(lagBuckets, steady.sched, 0.99)*1e3, "steady-sched-lag-p99-ms")
	b.ReportMetric(bucketQuantile(lagBuckets, steady.writer, 0.99)*1e3, "steady-writer-lag-p99-ms")
	b.ReportMetric(float64(steady.samples()), "steady-steps")
	b.ReportMetric(st.FirstTokenLagP99*1e3, "first-flush-lag-p99-ms")
	b.ReportMetric(tokens/float64(st.TokenWrites), "tokens/write")
}

// steadyLag sums the scheduler's and writers' lag histograms over the
// windows in which all n streams were decoding at once: after the burst of
// n arrivals (n connections opened within about 100 ms, whose handling
// competes with the driver) and before the first stream ends.
type steadyLag struct {
	sched, writer []int64
}

// watch polls s every millisecond until the returned stop is called and
// adds the lag observed while n sequences were running to l.
func (l *steadyLag) watch(s *Server, n int) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var sched0, writer0 []int64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			full := s.drivers[0].running.Load() >= int64(n)
			switch {
			case full && sched0 == nil:
				sched0, writer0 = s.metrics.schedulerLag.snapshot(), s.metrics.writerLag.snapshot()
			case !full && sched0 != nil:
				l.sched = addDiff(l.sched, s.metrics.schedulerLag.snapshot(), sched0)
				l.writer = addDiff(l.writer, s.metrics.writerLag.snapshot(), writer0)
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (l *steadyLag) samples() int64 {
	var n int64
	for _, c := range l.sched {
		n += c
	}
	return n
}

// addDiff adds now − then to sum, bucket by bucket.
func addDiff(sum, now, then []int64) []int64 {
	if sum == nil {
		sum = make([]int64, len(now))
	}
	for i := range now {
		sum[i] += now[i] - then[i]
	}
	return sum
}

// The benchmark's client process is this test binary run with these
// variables set: it streams that many requests at once from the URL and
// exits (see TestMain).
const (
	benchClientURL     = "LLMSIM_BENCH_CLIENT_URL"
	benchClientStreams = "LLMSIM_BENCH_CLIENT_STREAMS"
)

// TestMain runs the benchmark's client when the test binary is started as
// one, and the tests otherwise.
func TestMain(m *testing.M) {
	if url := os.Getenv(benchClientURL); url != "" {
		n, err := strconv.Atoi(os.Getenv(benchClientStreams))
		if err == nil {
			body, _ := json.Marshal(chatBody(true, "a short question about prefill"))
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}}
			err = streamConcurrently(client, url, body, n)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "llmsim bench client:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// streamConcurrently sends n streamed requests at once and reads every answer to its
// end, as cheaply as a client can (no parsing); it fails unless every
// stream ends with [DONE].
func streamConcurrently(client *http.Client, url string, body []byte, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				errs <- fmt.Errorf("sending: %w", err)
				return
			}
			defer resp.Body.Close()
			var tail [64]byte
			buf := make([]byte, 32<<10)
			got := 0
			for {
				k, err := resp.Body.Read(buf)
				if k > 0 {
					// keep the last bytes seen to check the end of the stream
					if k >= len(tail) {
						got = copy(tail[:], buf[k-len(tail):k])
					} else {
						keep := min(got, len(tail)-k)
						copy(tail[:], tail[got-keep:got])
						got = keep + copy(tail[keep:], buf[:k])
					}
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- fmt.Errorf("reading the stream: %w", err)
					return
				}
			}
			if !bytes.HasSuffix(tail[:got], []byte("data: [DONE]\n\n")) {
				errs <- fmt.Errorf("stream ended with %q, not [DONE]", tail[:got])
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
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
