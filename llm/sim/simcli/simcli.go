package simcli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"ragtime/llm/sim"
	"ragtime/llm/sim/load"
)

// Env is what the command gets from the program that runs it.
type Env struct {
	// Prog names the command in usage text ("llmsim", "ragtime llmsim").
	Prog string
	// Getenv reads the environment (the load's --api-key-env); nil means
	// os.Getenv.
	Getenv func(string) string
	// Stdout receives the command's output; nil means os.Stdout.
	Stdout io.Writer
	// NewFlagSet makes a flag set; nil makes a plain one writing usage to
	// os.Stderr.
	NewFlagSet func(name, usage string) *flag.FlagSet
	// Parse parses the arguments into fs; nil means fs.Parse. ragtime's own
	// also reads RAGTIME_<FLAG> variables.
	Parse func(fs *flag.FlagSet, args []string) error
}

func (e Env) withDefaults() Env {
	if e.Prog == "" {
		e.Prog = "llmsim"
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.NewFlagSet == nil {
		e.NewFlagSet = func(name, usage string) *flag.FlagSet {
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			fs.Usage = func() {
				fmt.Fprintf(fs.Output(), "Usage: %s\n\nFlags:\n", usage)
				fs.PrintDefaults()
			}
			return fs
		}
	}
	if e.Parse == nil {
		e.Parse = func(fs *flag.FlagSet, args []string) error { return fs.Parse(args) }
	}
	return e
}

// UsageError is a mistake in the command line (exit status 2).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Run runs the simulator command: `load` as the first argument runs the
// load generator, anything else serves the simulator until ctx ends.
func Run(ctx context.Context, env Env, args []string) error {
	env = env.withDefaults()
	if len(args) > 0 && args[0] == "load" {
		return runLoad(ctx, env, args[1:])
	}
	fs := env.NewFlagSet(env.Prog, env.Prog+" [flags]\n       "+env.Prog+" load [flags]   (open-loop load against a simulator; see "+env.Prog+" load --help)\n\n"+
		"An OpenAI-compatible inference SIMULATOR: it runs no model. It streams tokens on a\n"+
		"configurable cost model (prefill, decode, continuous batching, chunked prefill, a prefix\n"+
		"cache, replicas) so TTFT effects can be explored without a GPU or an API key. It also\n"+
		"serves /v1/embeddings and /api/embed (the hash embedder) and /rerank, /v1/rerank (BM25,\n"+
		"TEI and Cohere shapes) at known costs, and /metrics with vLLM's names. See docs/llmsim.md.")
	addr := fs.String("addr", ":8081", "address to listen on (host:port; port 0 picks a free one)")
	cfg := sim.DefaultConfig()
	cfg.RegisterFlags(fs)
	if err := env.Parse(fs, args); err != nil {
		return err
	}
	s, err := sim.New(cfg)
	if err != nil {
		return fmt.Errorf("llmsim: %w", err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on --addr %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(env.Stdout, "llmsim (simulator) serving an OpenAI-compatible API on http://%s/v1\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("llmsim: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// runLoad is `llmsim load`: an open-loop load generator for the
// simulator's experiments. It lives under llmsim because it is built for it
// (it reads llmsim's modelled timings and refuses remote servers), and it
// leaves ragtime's top-level command names to ragtime's own features.
func runLoad(ctx context.Context, env Env, args []string) error {
	fs := env.NewFlagSet(env.Prog+" load", env.Prog+" load --url URL --rate R --duration D --mix SHARE:TOKENS,... [flags]\n\n"+
		"Open-loop load against an OpenAI-compatible server on this machine (made for llmsim): Poisson\n"+
		"arrivals that never wait for earlier answers, a mix of prompt lengths sized exactly with the\n"+
		"tokenizer, optional shared prefixes. Prints TTFT p50/p95/p99 and p99/p50 (overall and per prompt\n"+
		"length, as the client saw it and as llmsim modelled it) and the share of prompt tokens cached.\n\n"+
		"Example (experiment 2, head-of-line blocking):\n"+
		"  "+env.Prog+" --addr 127.0.0.1:8081 --max-num-seqs 8 &\n"+
		"  "+env.Prog+" load --url http://127.0.0.1:8081/v1 --rate 1.15 --duration 10m --mix 0.1:8000,0.9:300 --max-tokens 64")
	cfg := load.Config{}
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8081/v1", "OpenAI-compatible base URL on this machine (loopback only)")
	fs.StringVar(&cfg.Model, "model", "llmsim", "model field of every request")
	keyEnv := fs.String("api-key-env", "", "name of an environment variable holding a bearer key to send (the key itself never goes on the command line)")
	fs.Float64Var(&cfg.Rate, "rate", 1, "mean arrival rate, in requests per second (Poisson, open loop)")
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "how long requests keep arriving (e.g. 90s, 10m)")
	mix := fs.String("mix", "1:300", "arrival mix SHARE:TOKENS,... of each request's own prompt length in tokens; shares add up to 1 (e.g. 0.1:8000,0.9:300)")
	fs.IntVar(&cfg.SharedPrefixTokens, "shared-prefix-tokens", 0, "tokens of a shared system prefix before every request's own part (0: none)")
	fs.IntVar(&cfg.Prefixes, "prefixes", 1, "distinct shared prefixes (tenants), one picked at random per request")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", 64, "max_tokens of every request, in tokens")
	fs.IntVar(&cfg.MaxRequests, "max-requests", 100000, "most requests sent, whatever rate × duration")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", 2000, "most requests awaiting an answer; arrivals beyond are skipped and counted (never queued)")
	fs.DurationVar(&cfg.Drain, "drain", 2*time.Minute, "how long answers may still arrive after --duration before the rest are cancelled")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of arrivals, classes and prompt text")
	fs.StringVar(&cfg.Encoding, "encoding", "o200k_base", "tiktoken encoding prompts are sized with (the server's --encoding)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := env.Parse(fs, args); err != nil {
		return err
	}
	var err error
	if cfg.Mix, err = load.ParseMix(*mix); err != nil {
		return &UsageError{Msg: "--" + err.Error()}
	}
	if *keyEnv != "" {
		if cfg.APIKey = env.Getenv(*keyEnv); cfg.APIKey == "" {
			return &UsageError{Msg: fmt.Sprintf("--api-key-env: the variable %s is empty or unset", *keyEnv)}
		}
	}
	rep, err := load.Run(ctx, cfg)
	if err != nil {
		return &UsageError{Msg: err.Error()}
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.WriteText(env.Stdout)
	return nil
}
