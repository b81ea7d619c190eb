package load

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime/llm/sim"
)

// startSim serves a simulator with cfg on 127.0.0.1 and returns its /v1 URL.
func startSim(t *testing.T, cfg sim.Config) string {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	return ts.URL + "/v1"
}

// TestChunkedPrefillCutsTheShortRequestsTail is experiment 2 through real
// HTTP, scaled to run in seconds: prompts 10× shorter (800 and 30 tokens,
// 64-token chunks) at 10× the per-token cost, every fixed cost 20× shorter
// and the rate 20× higher, which keeps the default model's proportions (a
// long prefill is about 18 short ones) at about 70 % utilisation. 8 slots.
// Without chunked prefill the short requests stuck behind a long prefill
// make the TTFT bimodal; with chunks their tail falls. It asserts on the
// TTFT the server modelled (reported over HTTP in llmsim's metrics object):
// the client's figure adds this machine's CPU contention, logged.
func TestChunkedPrefillCutsTheShortRequestsTail(t *testing.T) {
	costs := sim.Config{MaxNumSeqs: 8, PrefillMs: 0.75, PrefillMsPerToken: 0.04, PrefillMsQuadratic: 5e-6, ITLMs: 0.75, OutputTokens: 64}
	chunked := costs
	chunked.ChunkedPrefillTokens = 64
	mix, err := ParseMix("0.1:800,0.9:30")
	if err != nil {
		t.Fatal(err)
	}
	var reps [2]*Report
	var wg sync.WaitGroup
	for i, c := range []sim.Config{costs, chunked} {
		url := startSim(t, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rep, err := Run(context.Background(), Config{URL: url, Model: "m", Rate: 23, Duration: 3 * time.Second, Mix: mix,
				MaxTokens: 64, MaxRequests: 1000, MaxInflight: 500, Drain: 10 * time.Second, Seed: 2})
			if err != nil {
				t.Error(err)
				return
			}
			reps[i] = rep
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	plain, chunk := reps[0], reps[1]
	for _, r := range reps {
		if r.Failed > 0 || r.Completed < 40 || r.ServerTTFT.N != r.Completed {
			t.Fatalf("run: %d completed, %d with server timings, failures %v", r.Completed, r.ServerTTFT.N, r.Failures)
		}
	}
	short := func(r *Report) Percentiles { return r.Classes[1].ServerTTFT }
	t.Logf("no chunking: all %+v short %+v (client: short %+v)", plain.ServerTTFT, short(plain), plain.Classes[1].TTFT)
	t.Logf("chunked:     all %+v short %+v (client: short %+v)", chunk.ServerTTFT, short(chunk), chunk.Classes[1].TTFT)
	if plain.ServerTTFT.P99OverP50 < 5 {
		t.Errorf("without chunked prefill TTFT p99/p50 is %.2f, want ≥ 5 (bimodal)", plain.ServerTTFT.P99OverP50)
	}
	if short(chunk).P99 > short(plain).P99/2 {
		t.Errorf("short prompts' p99 %.1f ms with chunked prefill, %.1f ms without: want it to fall by half or more", short(chunk).P99, short(plain).P99)
	}
}

// TestPrefixRoutingKeepsTheCacheHits is experiment 3 through real HTTP: 16
// tenants' 2k-token prefixes over 4 replicas whose caches hold about 5 each.
// Round-robin spreads every tenant over every replica; prefix routing keeps
// each on one, so it finds its prefix cached far more often. The rate is
// modest because tokenizing each 2k-token prompt costs the simulator ~5 ms
// of CPU: on a busy 2-core machine a faster rate queues a tenant's requests
// before its first prefill is cached, which is a miss for prefix routing too.
func TestPrefixRoutingKeepsTheCacheHits(t *testing.T) {
	base := sim.Config{Replicas: 4, KVCacheBlocks: 640, PrefillMsPerToken: 0.0005, ITLMs: 0.2, OutputTokens: 2}
	mix := []Class{{Share: 1, PromptTokens: 50}}
	share := map[string]float64{}
	for _, routing := range []string{"round-robin", "prefix"} {
		cfg := base
		cfg.Routing = routing
		rep, err := Run(context.Background(), Config{URL: startSim(t, cfg), Model: "m", Rate: 60, Duration: 2500 * time.Millisecond, Mix: mix,
			SharedPrefixTokens: 2000, Prefixes: 16, MaxTokens: 2, MaxRequests: 1000, MaxInflight: 500, Drain: 10 * time.Second, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Failed > 0 || rep.Completed < 100 {
			t.Fatalf("%s: %d completed, failures %v", routing, rep.Completed, rep.Failures)
		}
		// the simulator counts a ChatML template: 5 tokens per message
		// (system and user) and 3 for the generation prompt
		if want := int64(rep.Completed) * (2050 + 13); rep.PromptTokens != want {
			t.Errorf("%s: servers counted %d prompt tokens, want %d (2,000 + 50 + 13 of chat template per request): prompts are not sized exactly", routing, rep.PromptTokens, want)
		}
		share[routing] = rep.CachedShare
	}
	t.Logf("cached share: %v", share)
	if share["prefix"] < 2*share["round-robin"] || share["prefix"] < 0.5 {
		t.Errorf("cached share with prefix routing %.2f, round-robin %.2f: want prefix routing well above, at least twice", share["prefix"], share["round-robin"])
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	mix := []Class{{Share: 1, PromptTokens: 10}}
	ok := Config{URL: "http://127.0.0.1:1/v1", Rate: 1, Duration: time.Second, Mix: mix, MaxTokens: 1, MaxRequests: 1, MaxInflight: 1}
	cases := map[string]func(c *Config){
		"url must point at this machine": func(c *Config) { c.URL = "http://example.com/v1" },
		"url must be an http://":         func(c *Config) { c.URL = "127.0.0.1:8081" },
		"rate must be":                   func(c *Config) { c.Rate = 0 },
		"duration must be":               func(c *Config) { c.Duration = 0 },
		"max-inflight must be":           func(c *Config) { c.MaxInflight = 0 },
		"max-requests must be":           func(c *Config) { c.MaxRequests = 0 },
	}
	for want, mutate := range cases {
		c := ok
		mutate(&c)
		if _, err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	for _, bad := range []string{"", "0.5:100", "1:0", "x:1", "0.5:100,0.6:10", "1.5:10"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted it", bad)
		}
	}
}
