// Command relay is the floor of `make bench-peer`: the least a Go service
// can do to answer an ask the way ragtime does on the wire, and nothing
// else. For GET /ask?q=…[&max_tokens=n] it makes the same two upstream calls as ragtime
// (one embedding of the question, one streamed chat completion) and relays
// the answer as /ask's SSE events: one token event written and flushed per
// upstream chunk, then done, which carries the embedding call's duration.
// No retrieval, prompt assembly, record, resume buffer, admission or auth
// (GET /metrics serves its scheduler's delays, for the held-stream report;
// --pprof-addr serves Go's profiler on a loopback address of its own).
//
// It is a benchmark reference, not a product: its CPU per ask, measured
// beside ragtime's by bench/peerload, is what one upstream read and one
// client write per token and two small HTTP calls cost on the machine at
// hand, so that ragtime's figure can be read against it. It does no work
// the wire does not need: a chunk's content is found by scanning its bytes
// and copied into the token event as the upstream escaped it.
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
	_ "net/http/pprof" // --pprof-addr
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ragtime/internal/sse"
	"ragtime/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	addr, baseURL, model, embedModel string
	pprofAddr                        string
	maxTokens                        int
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.addr, "addr", "127.0.0.1:0", "listen address (loopback)")
	fs.StringVar(&c.baseURL, "base-url", "", "the OpenAI-compatible upstream's base URL, e.g. http://127.0.0.1:8081/v1")
	fs.StringVar(&c.model, "model", "sim", "chat model")
	fs.StringVar(&c.embedModel, "embed-model", "sim-embed", "embedding model")
	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "serve Go's profiler (/debug/pprof/) on this loopback address, apart from /ask, so that a held run's profile compares with ragtime serve --pprof-addr's (empty: off)")
	fs.IntVar(&c.maxTokens, "max-tokens", 64, "max_tokens of a completion whose ask does not set max_tokens")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var problems []string
	if !strings.HasPrefix(c.baseURL, "http://") && !strings.HasPrefix(c.baseURL, "https://") {
		problems = append(problems, fmt.Sprintf("--base-url must be an http(s) URL, got %q", c.baseURL))
	}
	if c.maxTokens < 1 {
		problems = append(problems, fmt.Sprintf("--max-tokens must be at least 1, got %d", c.maxTokens))
	}
	if c.pprofAddr != "" {
		host, _, err := net.SplitHostPort(c.pprofAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			problems = append(problems, fmt.Sprintf("--pprof-addr must be a loopback host:port such as 127.0.0.1:6060, got %q", c.pprofAddr))
		}
	}
	if len(problems) > 0 {
		return c, errors.New(strings.Join(problems, "; "))
	}
	c.baseURL = strings.TrimRight(c.baseURL, "/")
	return c, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.addr, err)
	}
	srv := &http.Server{Handler: newRelay(cfg), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "relay serving on http://%s (upstream %s)\n", ln.Addr(), cfg.baseURL)
	if cfg.pprofAddr != "" {
		pln, err := net.Listen("tcp", cfg.pprofAddr)
		if err != nil {
			return fmt.Errorf("--pprof-addr: %w", err)
		}
		// net/http/pprof registered its handlers on http.DefaultServeMux.
		// Printed after the /ask address, which bench-peer.sh reads first.
		psrv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = psrv.Serve(pln) }()
		defer psrv.Close()
		fmt.Fprintf(stdout, "relay profiler on http://%s/debug/pprof/\n", pln.Addr())
	}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

// relay answers /ask by relaying the upstream's stream.
type relay struct {
	cfg    config
	client *http.Client
}

func newRelay(cfg config) http.Handler {
	// One keep-alive pool sized for the benchmark's concurrency, as ragtime
	// has: the default transport keeps 2 idle connections per host.
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	mux := http.NewServeMux()
	r := &relay{cfg: cfg, client: &http.Client{Transport: tr}}
	mux.HandleFunc("GET /ask", r.ask)
	mux.Handle("GET /metrics", schedMetrics())
	return mux
}

// schedMetrics serves go_sched_latencies_seconds, how long the relay's
// runnable goroutines waited to run, as ragtime's /metrics does, so that
// bench/peerload reads the scheduler's delay of either target the same way.
// It is read twice per held run, never on an ask's path.
func schedMetrics() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.SchedLatencies())
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

func (r *relay) ask(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query().Get("q")
	if strings.TrimSpace(q) == "" {
		http.Error(w, "q: the question is required", http.StatusBadRequest)
		return
	}
	maxTokens := r.cfg.maxTokens
	if v := req.URL.Query().Get("max_tokens"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			http.Error(w, "max_tokens: want a whole number of at least 1, got "+strconv.Quote(v), http.StatusBadRequest)
			return
		}
		maxTokens = n
	}
	ctx := req.Context()
	embedStart := time.Now()
	if err := r.embed(ctx, q); err != nil {
		http.Error(w, "embedding the question: "+err.Error(), http.StatusBadGateway)
		return
	}
	embedMs := float64(time.Since(embedStart)) / 1e6
	body, err := r.openStream(ctx, q, maxTokens)
	if err != nil {
		http.Error(w, "starting the completion: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer body.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	var ev []byte
	var writeErr error
	rd := sse.Reader{Handle: func(_ string, data []byte, _ time.Time) (bool, error) {
		if string(data) == "[DONE]" {
			return true, nil
		}
		text := contentOf(data)
		if text == nil {
			return false, nil
		}
		ev = append(append(append(ev[:0], "event: token\ndata: {\"text\":"...), text...), "}\n\n"...)
		if _, writeErr = w.Write(ev); writeErr == nil {
			writeErr = rc.Flush()
		}
		return false, writeErr
	}}
	if _, err := rd.Run(body); err != nil {
		if writeErr == nil { // the client is gone otherwise
			fmt.Fprintf(w, "event: error\ndata: {\"code\":\"llm_stream\"}\n\n")
		}
		return
	}
	// The embedding call's duration, as ragtime's embed stage times it, so
	// that bench/peerload can set the two side by side.
	fmt.Fprintf(w, "event: done\ndata: {\"embed_ms\":%.3f}\n\n", embedMs)
}

// contentOf returns the JSON string literal (quotes and escapes as sent)
// of the first "content" field of an OpenAI chunk, or nil when it has none
// or it is empty. It scans the bytes instead of decoding the chunk: the
// relay is the floor, so it does no work the wire does not need.
func contentOf(chunk []byte) []byte {
	_, rest, ok := bytes.Cut(chunk, []byte(`"content":`))
	if !ok {
		return nil
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) < 3 || rest[0] != '"' || rest[1] == '"' { // null, or ""
		return nil
	}
	for i := 1; i < len(rest); i++ {
		switch rest[i] {
		case '\\':
			i++
		case '"':
			return rest[:i+1]
		}
	}
	return nil
}

// embed embeds q and discards the vector: the call is what is measured.
// It asks for base64, as ragtime's embedder does, so that the upstream does
// the same work for both.
func (r *relay) embed(ctx context.Context, q string) error {
	b, _ := json.Marshal(map[string]any{"model": r.cfg.embedModel, "input": []string{q}, "encoding_format": "base64"})
	resp, err := r.post(ctx, "/embeddings", b)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			Embedding string `json:"embedding"` // base64 of little-endian float32s
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("decoding the embeddings: %w", err)
	}
	if len(out.Data) != 1 || len(out.Data[0].Embedding) == 0 {
		return fmt.Errorf("%d embeddings for one input", len(out.Data))
	}
	return nil
}

// openStream starts a streamed chat completion of q and returns its body.
func (r *relay) openStream(ctx context.Context, q string, maxTokens int) (io.ReadCloser, error) {
	b, _ := json.Marshal(map[string]any{
		"model": r.cfg.model, "stream": true, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": q}},
	})
	resp, err := r.post(ctx, "/chat/completions", b)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// post sends a JSON body to path and returns a 200 response.
func (r *relay) post(ctx context.Context, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, fmt.Errorf("POST %s: HTTP %d", path, resp.StatusCode)
	}
	return resp, nil
}
