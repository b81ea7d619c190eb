package load

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ragtime"
	"ragtime/internal/sse"
	"ragtime/llm/tokens"
)

// Class is one kind of request in the arrival mix.
type Class struct {
	// Share is the fraction of arrivals of this class (the shares of a mix
	// add up to 1).
	Share float64
	// PromptTokens is the length of the request's own part of the prompt
	// (its user message), in tokens; a shared prefix comes on top.
	PromptTokens int
}

// ParseMix reads "SHARE:TOKENS,..." (e.g. "0.1:8000,0.9:300"); the shares
// must add up to 1.
func ParseMix(spec string) ([]Class, error) {
	var out []Class
	total := 0.0
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		shareText, tokText, ok := strings.Cut(part, ":")
		share, err1 := strconv.ParseFloat(shareText, 64)
		tok, err2 := strconv.Atoi(tokText)
		if !ok || err1 != nil || err2 != nil || share <= 0 || share > 1 || tok < 1 {
			return nil, fmt.Errorf("mix: %q is not SHARE:TOKENS with 0 < SHARE ≤ 1 and TOKENS ≥ 1", part)
		}
		total += share
		out = append(out, Class{Share: share, PromptTokens: tok})
	}
	if len(out) == 0 {
		return nil, errors.New("mix: empty; want SHARE:TOKENS,... e.g. 0.1:8000,0.9:300")
	}
	if math.Abs(total-1) > 1e-6 {
		return nil, fmt.Errorf("mix: shares add up to %g, not 1", total)
	}
	return out, nil
}

// Config describes one open-loop run.
type Config struct {
	// URL is the OpenAI-compatible base URL, e.g. http://127.0.0.1:8081/v1;
	// it must be a loopback address.
	URL string
	// Model is the request's model field.
	Model string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Rate is the mean arrival rate, in requests per second; arrivals are a
	// Poisson process and never wait for earlier answers (open loop).
	Rate float64
	// Duration is how long requests keep arriving.
	Duration time.Duration
	// Mix is the arrival mix of prompt lengths.
	Mix []Class
	// SharedPrefixTokens, when > 0, puts a system message of this many
	// tokens before every request's own part, drawn from Prefixes distinct
	// prefixes (tenants) at random.
	SharedPrefixTokens int
	// Prefixes is the number of distinct shared prefixes (0 means 1).
	Prefixes int
	// MaxTokens is every request's max_tokens.
	MaxTokens int
	// MaxRequests bounds the requests sent, whatever Rate × Duration.
	MaxRequests int
	// MaxInflight bounds the requests awaiting an answer; an arrival beyond
	// it is not sent and is counted as skipped (waiting would make the
	// load closed-loop).
	MaxInflight int
	// Drain is how long answers may still arrive after Duration; requests
	// still open then are cancelled and counted as failed.
	Drain time.Duration
	// Seed makes arrivals, classes and prompts reproducible.
	Seed int64
	// Encoding is the tiktoken encoding prompts are sized with; it should be
	// the server's (llmsim's --encoding; "" means o200k_base).
	Encoding string
}

// Bounds of a run.
const (
	MaxRate     = 10000
	MaxDuration = 24 * time.Hour
)

func (c *Config) validate() error {
	var errs []error
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		errs = append(errs, fmt.Errorf("url must be an http:// base URL such as http://127.0.0.1:8081/v1, got %q", c.URL))
	case !loopback(u.Hostname()):
		errs = append(errs, fmt.Errorf("url must point at this machine (127.0.0.1, ::1 or localhost): the load generator is for the simulator and will not load a remote server, got host %q", u.Hostname()))
	}
	if c.Rate <= 0 || c.Rate > MaxRate {
		errs = append(errs, fmt.Errorf("rate must be > 0 and ≤ %d requests/s, got %g", MaxRate, c.Rate))
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		errs = append(errs, fmt.Errorf("duration must be > 0 and ≤ %v, got %v", MaxDuration, c.Duration))
	}
	if len(c.Mix) == 0 {
		errs = append(errs, errors.New("mix is required"))
	}
	if c.SharedPrefixTokens < 0 {
		errs = append(errs, fmt.Errorf("shared-prefix-tokens must be ≥ 0, got %d", c.SharedPrefixTokens))
	}
	if c.Prefixes < 0 || c.Prefixes > 10000 {
		errs = append(errs, fmt.Errorf("prefixes must be between 0 and 10000, got %d", c.Prefixes))
	}
	if c.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("max-tokens must be ≥ 1, got %d", c.MaxTokens))
	}
	if c.MaxRequests < 1 {
		errs = append(errs, fmt.Errorf("max-requests must be ≥ 1, got %d", c.MaxRequests))
	}
	if c.MaxInflight < 1 {
		errs = append(errs, fmt.Errorf("max-inflight must be ≥ 1, got %d", c.MaxInflight))
	}
	if c.Drain < 0 {
		errs = append(errs, fmt.Errorf("drain must be ≥ 0, got %v", c.Drain))
	}
	return errors.Join(errs...)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Percentiles summarise a sample of durations, in milliseconds.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	// P99OverP50 is the tail ratio (0 when p50 is 0).
	P99OverP50 float64 `json:"p99_over_p50"`
}

// percentiles uses the nearest-rank method.
func percentiles(ms []float64) Percentiles {
	if len(ms) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	p := Percentiles{N: len(s), P50: ragtime.NearestRank(s, 0.50), P95: ragtime.NearestRank(s, 0.95),
		P99: ragtime.NearestRank(s, 0.99), Max: s[len(s)-1]}
	if p.P50 > 0 {
		p.P99OverP50 = p.P99 / p.P50
	}
	return p
}

// ClassReport is the TTFT of one class of the mix.
type ClassReport struct {
	Share        float64     `json:"share"`
	PromptTokens int         `json:"prompt_tokens"`
	TTFT         Percentiles `json:"ttft"`
	ServerTTFT   Percentiles `json:"server_ttft"`
}

// Report is the outcome of a run. TTFT is measured by the client from the
// moment a request is sent to its first content (or reasoning) delta;
// ServerTTFT is the server's own figure (llmsim's metrics object, present
// when the server reports one).
type Report struct {
	URL          string         `json:"url"`
	Rate         float64        `json:"rate_per_s"`
	Duration     float64        `json:"duration_s"`
	Elapsed      float64        `json:"elapsed_s"`
	Sent         int            `json:"sent"`
	Completed    int            `json:"completed"`
	Failed       int            `json:"failed"`
	Skipped      int            `json:"skipped"`
	Failures     map[string]int `json:"failures,omitempty"`
	TTFT         Percentiles    `json:"ttft"`
	ServerTTFT   Percentiles    `json:"server_ttft"`
	Classes      []ClassReport  `json:"classes"`
	PromptTokens int64          `json:"prompt_tokens"`
	CachedTokens int64          `json:"cached_tokens"`
	// CachedShare is CachedTokens / PromptTokens over completed requests.
	CachedShare float64 `json:"cached_share"`
}

// result is one request's outcome.
type result struct {
	class          int
	ttft, server   float64 // ms; server < 0 when not reported
	prompt, cached int
	err            string
}

// Run sends the load and reports what it measured. It returns early (with
// what it has) when ctx ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.Prefixes = max(cfg.Prefixes, 1)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configuring load: %w", err)
	}
	counter, err := tokens.New(cmp.Or(cfg.Encoding, "o200k_base"))
	if err != nil {
		return nil, fmt.Errorf("configuring load: %w", err)
	}
	gen, err := newPromptGen(counter)
	if err != nil {
		return nil, fmt.Errorf("configuring load: %w", err)
	}
	prefixes := make([]string, 0, cfg.Prefixes)
	if cfg.SharedPrefixTokens > 0 {
		for i := range cfg.Prefixes {
			prefixes = append(prefixes, gen.text(cfg.SharedPrefixTokens, uint64(i)+1<<40))
		}
	}
	endpoint := strings.TrimRight(cfg.URL, "/") + "/chat/completions"
	client := &http.Client{Transport: &http.Transport{
		Proxy:               nil, // loopback only: never through a proxy
		MaxIdleConns:        cfg.MaxInflight,
		MaxIdleConnsPerHost: cfg.MaxInflight,
		IdleConnTimeout:     30 * time.Second,
	}}
	defer client.CloseIdleConnections()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x10ad))
	var (
		mu       sync.Mutex
		results  []result
		wg       sync.WaitGroup
		inflight atomic.Int64
		skipped  int
	)
	start := time.Now()
	end := start.Add(cfg.Duration)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	at := start
	sent := 0
arrivals:
	for sent < cfg.MaxRequests {
		at = at.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)))
		if at.After(end) {
			break
		}
		class := pickClass(cfg.Mix, rng.Float64())
		prefix := ""
		if len(prefixes) > 0 {
			prefix = prefixes[rng.IntN(len(prefixes))]
		}
		own := rng.Uint64()
		timer.Reset(time.Until(at))
		select {
		case <-timer.C:
		case <-runCtx.Done():
			break arrivals
		}
		if inflight.Load() >= int64(cfg.MaxInflight) {
			skipped++
			continue
		}
		sent++
		inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			body := requestBody(cfg, prefix, gen.text(cfg.Mix[class].PromptTokens, own))
			r := send(runCtx, client, endpoint, cfg.APIKey, body)
			r.class = class
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(end.Add(cfg.Drain))):
		cancel()
		<-done
	case <-ctx.Done():
		cancel()
		<-done
	}
	rep := summarise(cfg, results, time.Since(start))
	rep.Sent, rep.Skipped = sent, skipped
	return rep, nil
}

func pickClass(mix []Class, x float64) int {
	for i, c := range mix {
		if x < c.Share {
			return i
		}
		x -= c.Share
	}
	return len(mix) - 1
}

func requestBody(cfg Config, prefix, own string) []byte {
	msgs := make([]map[string]string, 0, 2)
	if prefix != "" {
		msgs = append(msgs, map[string]string{"role": "system", "content": prefix})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": own})
	b, _ := json.Marshal(map[string]any{ // maps of strings and ints always encode
		"model":          cfg.Model,
		"messages":       msgs,
		"max_tokens":     cfg.MaxTokens,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	return b
}

// chunk is the part of a streamed chunk the load generator reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Metrics *struct {
		ArrivalTime    float64 `json:"arrival_time"`
		FirstTokenTime float64 `json:"first_token_time"`
	} `json:"metrics"`
}

// send streams one request and measures it.
func send(ctx context.Context, client *http.Client, endpoint, key string, body []byte) result {
	r := result{server: -1}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		r.err = "request"
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Llmsim-Timings", "1") // llmsim's ground truth; other servers ignore it
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.err = classify(ctx, err)
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		r.err = "status " + strconv.Itoa(resp.StatusCode)
		return r
	}
	first, done, malformed := false, false, false
	sr := sse.Reader{Handle: func(_ string, data []byte, at time.Time) (bool, error) {
		if string(data) == "[DONE]" {
			done = true
			return true, nil
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			malformed = true
			return true, nil
		}
		if !first {
			for _, ch := range c.Choices {
				if ch.Delta.Content != "" || ch.Delta.ReasoningContent != "" || ch.Delta.Reasoning != "" {
					first = true
					r.ttft = float64(at.Sub(start).Microseconds()) / 1e3
					break
				}
			}
		}
		if c.Usage != nil {
			r.prompt = c.Usage.PromptTokens
			if c.Usage.PromptTokensDetails != nil {
				r.cached = c.Usage.PromptTokensDetails.CachedTokens
			}
		}
		if c.Metrics != nil && c.Metrics.FirstTokenTime > 0 {
			r.server = (c.Metrics.FirstTokenTime - c.Metrics.ArrivalTime) * 1e3
		}
		return false, nil
	}}
	_, err = sr.Run(resp.Body)
	switch {
	case err != nil:
		r.err = classify(ctx, err)
	case malformed:
		r.err = "malformed chunk"
	case !done:
		r.err = "stream ended before [DONE]"
	case !first:
		r.err = "no token"
	}
	return r
}

func classify(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return "cancelled at the end of the drain"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "connection dropped"
	default:
		var ne net.Error
		if errors.As(err, &ne) {
			return "network"
		}
		return "transport"
	}
}

func summarise(cfg Config, results []result, elapsed time.Duration) *Report {
	rep := &Report{URL: cfg.URL, Rate: cfg.Rate, Duration: cfg.Duration.Seconds(), Elapsed: elapsed.Seconds()}
	var all, server []float64
	byClass := make([][]float64, len(cfg.Mix))
	serverByClass := make([][]float64, len(cfg.Mix))
	for _, r := range results {
		if r.err != "" {
			rep.Failed++
			if rep.Failures == nil {
				rep.Failures = map[string]int{}
			}
			rep.Failures[r.err]++
			continue
		}
		rep.Completed++
		all = append(all, r.ttft)
		byClass[r.class] = append(byClass[r.class], r.ttft)
		if r.server >= 0 {
			server = append(server, r.server)
			serverByClass[r.class] = append(serverByClass[r.class], r.server)
		}
		rep.PromptTokens += int64(r.prompt)
		rep.CachedTokens += int64(r.cached)
	}
	rep.TTFT = percentiles(all)
	rep.ServerTTFT = percentiles(server)
	for i, c := range cfg.Mix {
		rep.Classes = append(rep.Classes, ClassReport{Share: c.Share, PromptTokens: c.PromptTokens + cfg.SharedPrefixTokens, TTFT: percentiles(byClass[i]), ServerTTFT: percentiles(serverByClass[i])})
	}
	if rep.PromptTokens > 0 {
		rep.CachedShare = float64(rep.CachedTokens) / float64(rep.PromptTokens)
	}
	return rep
}

// WriteText prints r for a person.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "llmsim load: %s, %.3g requests/s for %gs (elapsed %.1fs)\n", r.URL, r.Rate, r.Duration, r.Elapsed)
	fmt.Fprintf(w, "requests: %d sent, %d completed, %d failed, %d skipped (max in flight)\n", r.Sent, r.Completed, r.Failed, r.Skipped)
	keys := make([]string, 0, len(r.Failures))
	for k := range r.Failures {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  failed: %s × %d\n", k, r.Failures[k])
	}
	row := func(name string, p Percentiles) {
		if p.N == 0 {
			fmt.Fprintf(w, "%-26s n=0\n", name)
			return
		}
		fmt.Fprintf(w, "%-26s n=%-6d p50 %8.1f ms  p95 %8.1f ms  p99 %8.1f ms  max %8.1f ms  p99/p50 %5.2f\n",
			name, p.N, p.P50, p.P95, p.P99, p.Max, p.P99OverP50)
	}
	row("TTFT (client)", r.TTFT)
	if r.ServerTTFT.N > 0 {
		row("TTFT (server, modelled)", r.ServerTTFT)
	}
	for _, c := range r.Classes {
		row(fmt.Sprintf("  %d-token prompts", c.PromptTokens), c.TTFT)
		if c.ServerTTFT.N > 0 {
			row("    (server, modelled)", c.ServerTTFT)
		}
	}
	fmt.Fprintf(w, "cached prompt tokens: %d of %d (%.1f %%)\n", r.CachedTokens, r.PromptTokens, 100*r.CachedShare)
}
