package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"ragtime"
	"ragtime/llm/sim"
)

// askTokens is the answer's length in BenchmarkAskOverhead: make
// bench-peer's, so its cost per op is an ask's as the peer benchmark asks.
const askTokens = 64

// BenchmarkAskOverhead measures one whole GET /ask in-process against
// llmsim with zero delays, so what is left is ragtime's own cost: the
// retrieval stages, the HTTP round trips and the SSE writes (and the
// simulator's and the client's, in the same process). It reports
// overhead_ms (the TTFT no stage accounts for) at p50 and p99. Its
// instruction count is repeatable where its time is not:
// valgrind --tool=callgrind on the test binary with -test.benchtime 200x.
func BenchmarkAskOverhead(b *testing.B) {
	dbURL, _ := testDB(b)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(b, env)
	_, simURL := startSim(b, func(c *sim.Config) {
		c.PrefillMs, c.PrefillMsPerToken, c.ITLMs, c.OutputTokens = 0, 0, 0, askTokens
	})
	// One client asks as fast as it can: the per-caller rate limit is off.
	srv := startServe(b, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL, "--llm-model", "m", "--rate", "0")
	client := &http.Client{}
	url := fmt.Sprintf("%s/ask?q=how+does+prefill+grow&top_k=4&max_tokens=%d", srv.url, askTokens)
	var overheads, ttfts []float64
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		i := strings.LastIndex(string(body), "event: done\ndata: ")
		if i < 0 {
			b.Fatalf("no done event in %s", body)
		}
		var d struct{ OverheadMs, TTFTMs float64 }
		var raw map[string]json.RawMessage
		line := string(body[i+len("event: done\ndata: "):])
		if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &raw); err != nil {
			b.Fatal(err)
		}
		_ = json.Unmarshal(raw["overhead_ms"], &d.OverheadMs)
		_ = json.Unmarshal(raw["ttft_ms"], &d.TTFTMs)
		overheads = append(overheads, d.OverheadMs)
		ttfts = append(ttfts, d.TTFTMs)
	}
	b.StopTimer()
	b.ReportMetric(percentile(overheads, 0.50), "overhead-p50-ms")
	b.ReportMetric(percentile(overheads, 0.99), "overhead-p99-ms")
	b.ReportMetric(percentile(ttfts, 0.50), "ttft-p50-ms")
}

// percentile is the nearest-rank percentile of xs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return ragtime.NearestRank(s, p)
}
