package sim

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"ragtime/retrieval"
)

// OwnedBy is the owned_by field of every model the simulator lists, so no one
// mistakes it for a real model.
const OwnedBy = "ragtime-llmsim (simulator)"

// DefaultModel is the model name reported when Config.Model is empty and the
// request names none.
const DefaultModel = "llmsim"

// Config holds every knob of the simulator. The zero value is a valid,
// instantaneous simulator; DefaultConfig holds the flag defaults.
type Config struct {
	// Model, when set, is the only model served: requests naming another get
	// 404 model_not_found. Empty accepts any model name.
	Model string
	// APIKey, when set, must be sent as "Authorization: Bearer KEY"; other
	// requests get 401.
	APIKey string
	// Encoding is the tiktoken encoding prompt tokens are counted with
	// ("" means o200k_base).
	Encoding string

	// PrefillMs is the fixed cost of a prefill, in milliseconds.
	PrefillMs float64
	// PrefillMsPerToken is the prefill cost per prompt token, in milliseconds.
	PrefillMsPerToken float64
	// ITLMs is the inter-token latency of decode at batch 1, in
	// milliseconds.
	ITLMs float64
	// ITLMsPerSeq lengthens each decode step by this many milliseconds per
	// decoding sequence beyond the first (continuous batching only): a step
	// over n sequences lasts ITLMs + ITLMsPerSeq × (n − 1). 0 keeps the
	// step at ITLMs whatever the batch.
	ITLMsPerSeq float64
	// OutputTokens is the answer length in tokens (words) when the request's
	// max_tokens is not smaller.
	OutputTokens int

	// PrefillMsQuadratic is the prefill cost per uncached prompt token
	// squared, in milliseconds (attention reads every earlier token).
	PrefillMsQuadratic float64
	// ITLJitter spreads each decode step uniformly over ±ITLJitter × its length
	// (0 to 1).
	ITLJitter float64

	// MaxNumSeqs is the number of sequences an engine runs at once
	// (continuous batching); 0 means unlimited, every request on its own
	// timeline as if alone.
	MaxNumSeqs int
	// MaxQueue bounds the FIFO of requests waiting for a slot, per engine;
	// a request beyond it gets 429. 0 means unbounded.
	MaxQueue int
	// ChunkedPrefillTokens, when > 0, caps the prompt tokens a sequence
	// prefills per engine step, so prefills interleave with decode steps
	// instead of holding them back.
	ChunkedPrefillTokens int
	// KVCacheBlocks is the prefix cache's size per engine in 16-token
	// blocks; 0 disables prefix caching. DefaultConfig turns it on with
	// DefaultKVCacheBlocks, as vLLM has prefix caching on by default.
	KVCacheBlocks int
	// Replicas is the number of independent engines (each with its own
	// prefix cache); 0 and 1 mean one.
	Replicas int
	// Routing picks an engine per request: "round-robin" or "prefix"
	// (affinity by a hash of the prompt's first blocks).
	Routing string

	// ReasoningTokens is the number of reasoning tokens streamed before the
	// answer.
	ReasoningTokens int
	// ReasoningField is the delta field reasoning is streamed in:
	// "reasoning_content" (DeepSeek, vLLM) or "reasoning" (OpenRouter, Ollama).
	ReasoningField string

	// Faults injects failures at rates: a comma-separated list of
	// KIND=RATE with KIND one of 401, 404, 429, 500, stall, drop, malformed,
	// nochoices (e.g. "429=0.05,drop=0.01"). A request's X-Llmsim-Fault
	// header forces one kind.
	Faults string
	// StallMs is how long a "stall" fault holds the first token back, in
	// milliseconds.
	StallMs float64
	// RetryAfterSeconds is the Retry-After of 429 answers.
	RetryAfterSeconds int
	// ServerTimings adds vLLM-style "metrics" and llama.cpp-style "timings"
	// objects to every answer; without it only requests with the header
	// X-Llmsim-Timings: 1 get them.
	ServerTimings bool
	// CloseAfterStream closes the connection after every streamed answer
	// (Connection: close), as llama-server does.
	CloseAfterStream bool
	// PrefillShiftAfter, when > 0, multiplies the prefill cost (overhead,
	// per token and quadratic) of every chat request after the first
	// PrefillShiftAfter that reach the engine by PrefillShiftFactor: a
	// server whose load changes mid-run, at a known point.
	PrefillShiftAfter int
	// PrefillShiftFactor is that multiplier (2: the prefill cost doubles).
	PrefillShiftFactor float64
	// CoarseTimers trusts the runtime's timers alone, about 1 ms late on an
	// idle machine, instead of also arming a kernel timerfd (Linux) that
	// wakes the scheduler within tens of microseconds. Either way a driver
	// polls the clock only through the last 200 µs before a step at least
	// 5 ms away.
	CoarseTimers bool

	// EmbedMs is the latency of one /v1/embeddings (or Ollama /api/embed)
	// request, in milliseconds, whatever its size.
	EmbedMs float64
	// EmbedMsPerInput adds this many milliseconds per input text.
	EmbedMsPerInput float64
	// EmbedDimensions is the embedding dimension when the request does not
	// ask for one ("dimensions"); 0 means 512, ragtime's hash default.
	EmbedDimensions int
	// RerankMs is the latency of one rerank request, in milliseconds.
	RerankMs float64
	// RerankMsPerDoc adds this many milliseconds per document reranked (a
	// cross-encoder scores each query–document pair).
	RerankMsPerDoc float64

	// Seed makes the generated text differ between simulators; the same seed
	// and prompt always give the same text.
	Seed int64
	// MaxBodyBytes bounds a request body (0 means 8 MiB).
	MaxBodyBytes int64
}

// DefaultKVCacheBlocks is the default prefix cache per engine: 6,144
// blocks of 16 tokens, 98,304 tokens. A 7B-class model in fp16 with full
// multi-head attention (32 layers × 4,096 dimensions, K and V) keeps
// 0.5 MiB of KV cache per token; on an 80 GB A100 at vLLM's default 0.9
// memory utilisation, the pool left after 13.5 GB of weights and a few GB
// of activations is about 50 GB, ≈ 100k tokens (docs/llmsim.md).
const DefaultKVCacheBlocks = 6144

// DefaultConfig returns the configuration the flags default to: costs
// roughly those of a 7B-class model on one data-centre GPU, with prefix
// caching on (see docs/llmsim.md).
func DefaultConfig() Config {
	return Config{
		KVCacheBlocks:      DefaultKVCacheBlocks,
		Encoding:           "o200k_base",
		PrefillMs:          15,
		PrefillMsPerToken:  0.08,
		PrefillMsQuadratic: 1e-6,
		ITLMs:              15,
		ITLMsPerSeq:        0.05,
		OutputTokens:       128,
		Routing:            "round-robin",
		ReasoningField:     "reasoning_content",
		StallMs:            30000,
		RetryAfterSeconds:  1,
		MaxBodyBytes:       8 << 20,
		EmbedMs:            5,
		EmbedMsPerInput:    0.5,
		EmbedDimensions:    512,
		RerankMs:           10,
		RerankMsPerDoc:     1.5,
		PrefillShiftFactor: 2,
	}
}

// RegisterFlags registers one flag per knob on fs, with c's current values as
// defaults, writing into c when fs is parsed.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Model, "model", c.Model, "the only model name the simulator serves; requests naming another get 404 model_not_found (empty: accept any)")
	fs.StringVar(&c.APIKey, "api-key", c.APIKey, "require this bearer key; other requests get 401 (empty: no auth)")
	fs.StringVar(&c.Encoding, "encoding", c.Encoding, "tiktoken encoding prompt tokens are counted with (o200k_base, cl100k_base)")
	fs.Float64Var(&c.PrefillMs, "prefill-ms", c.PrefillMs, "fixed prefill cost per request, in milliseconds")
	fs.Float64Var(&c.PrefillMsPerToken, "prefill-ms-per-token", c.PrefillMsPerToken, "prefill cost per prompt token, in milliseconds (prefill = prefill-ms + this × prompt tokens)")
	fs.Float64Var(&c.ITLMs, "itl-ms", c.ITLMs, "inter-token latency of decode at batch 1, in milliseconds between output tokens")
	fs.Float64Var(&c.ITLMsPerSeq, "itl-ms-per-seq", c.ITLMsPerSeq, "decode step time added per decoding sequence beyond the first, in milliseconds (step = itl-ms + this × (batch − 1); needs max-num-seqs; 0.05 ≈ a 7B model's 14 GFLOP per token at an A100's 312 TFLOP/s)")
	fs.IntVar(&c.OutputTokens, "output-tokens", c.OutputTokens, "output length in tokens (words) when the request's max_tokens is not smaller")
	fs.Float64Var(&c.PrefillMsQuadratic, "prefill-ms-quadratic", c.PrefillMsQuadratic, "prefill cost per uncached prompt token squared, in milliseconds (attention; 1e-6 adds 67 ms at 8k tokens)")
	fs.Float64Var(&c.ITLJitter, "itl-jitter", c.ITLJitter, "decode step jitter as a fraction of the step, uniform ± (0 to 1)")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "sequences an engine runs at once with continuous batching, in slots (0: unlimited, each request on its own timeline)")
	fs.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "requests waiting for a slot per engine before 429, in requests (0: unbounded; needs max-num-seqs)")
	fs.IntVar(&c.ChunkedPrefillTokens, "chunked-prefill-tokens", c.ChunkedPrefillTokens, "prompt tokens a sequence prefills per engine step, interleaved with decode (0: whole prefill in one step that blocks decode)")
	fs.IntVar(&c.KVCacheBlocks, "kv-cache-blocks", c.KVCacheBlocks, "prefix cache size per engine, in 16-token blocks, LRU (0: no prefix cache; the default 6144 is a 7B model's KV pool on one 80 GB GPU, as vLLM caches prefixes by default)")
	fs.IntVar(&c.Replicas, "replicas", c.Replicas, "independent engines in this process, each with its own prefix cache, in engines")
	fs.StringVar(&c.Routing, "routing", c.Routing, "how requests pick a replica: round-robin or prefix (affinity by the prompt's first blocks)")
	fs.IntVar(&c.ReasoningTokens, "reasoning-tokens", c.ReasoningTokens, "reasoning tokens streamed before the answer, in tokens")
	fs.StringVar(&c.ReasoningField, "reasoning-field", c.ReasoningField, "delta field of reasoning tokens: reasoning_content or reasoning")
	fs.StringVar(&c.Faults, "faults", c.Faults, "failure rates per request, KIND=RATE,... with KIND 401, 404, 429, 500, stall, drop, malformed, nochoices (the X-Llmsim-Fault header forces one)")
	fs.Float64Var(&c.StallMs, "stall-ms", c.StallMs, "how long a stall fault holds the first token back, in milliseconds")
	fs.IntVar(&c.RetryAfterSeconds, "retry-after", c.RetryAfterSeconds, "Retry-After of 429 answers, in seconds")
	fs.IntVar(&c.PrefillShiftAfter, "prefill-shift-after", c.PrefillShiftAfter, "after this many chat requests have reached the engine, multiply every later one's prefill cost by --prefill-shift-factor, in requests (a load change mid-run; 0: never)")
	fs.Float64Var(&c.PrefillShiftFactor, "prefill-shift-factor", c.PrefillShiftFactor, "what --prefill-shift-after multiplies the prefill cost by (2: it doubles)")
	fs.BoolVar(&c.CloseAfterStream, "close-after-stream", c.CloseAfterStream, "close the connection after every streamed answer (Connection: close), as llama-server does")
	fs.BoolVar(&c.ServerTimings, "server-timings", c.ServerTimings, "add vLLM-style metrics and llama.cpp-style timings to every answer (else only with the header X-Llmsim-Timings: 1)")
	fs.BoolVar(&c.CoarseTimers, "coarse-timers", c.CoarseTimers, "wake engine steps with the Go runtime's timers alone (about 1 ms late when idle) instead of also arming a kernel timerfd (tens of µs); either way a driver polls the clock only through the last 200 µs before a step ≥ 5 ms away")
	fs.Float64Var(&c.EmbedMs, "embed-ms", c.EmbedMs, "latency of one /v1/embeddings or /api/embed request, in milliseconds")
	fs.Float64Var(&c.EmbedMsPerInput, "embed-ms-per-input", c.EmbedMsPerInput, "embedding latency added per input text, in milliseconds")
	fs.IntVar(&c.EmbedDimensions, "embed-dimensions", c.EmbedDimensions, "embedding dimension when the request sets no dimensions, in floats (8 to 65536; the hash embedder's vectors, as ragtime's --embedder hash)")
	fs.Float64Var(&c.RerankMs, "rerank-ms", c.RerankMs, "latency of one rerank request (/rerank, /v1/rerank, /v2/rerank), in milliseconds")
	fs.Float64Var(&c.RerankMsPerDoc, "rerank-ms-per-doc", c.RerankMsPerDoc, "rerank latency added per document, in milliseconds (a cross-encoder scores every query-document pair)")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the generated text (same seed and prompt, same text)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest accepted request body, in bytes")
}

// validate reports the first knob that makes no sense.
func (c *Config) validate() error {
	var errs []error
	neg := func(name string, v float64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must be ≥ 0, got %g", name, v))
		}
	}
	neg("prefill-ms", c.PrefillMs)
	neg("prefill-ms-per-token", c.PrefillMsPerToken)
	neg("itl-ms", c.ITLMs)
	neg("itl-ms-per-seq", c.ITLMsPerSeq)
	neg("output-tokens", float64(c.OutputTokens))
	neg("max-body-bytes", float64(c.MaxBodyBytes))
	neg("prefill-ms-quadratic", c.PrefillMsQuadratic)
	neg("max-num-seqs", float64(c.MaxNumSeqs))
	neg("max-queue", float64(c.MaxQueue))
	neg("chunked-prefill-tokens", float64(c.ChunkedPrefillTokens))
	neg("kv-cache-blocks", float64(c.KVCacheBlocks))
	neg("replicas", float64(c.Replicas))
	neg("reasoning-tokens", float64(c.ReasoningTokens))
	neg("stall-ms", c.StallMs)
	neg("retry-after", float64(c.RetryAfterSeconds))
	neg("embed-ms", c.EmbedMs)
	neg("embed-ms-per-input", c.EmbedMsPerInput)
	neg("rerank-ms", c.RerankMs)
	neg("rerank-ms-per-doc", c.RerankMsPerDoc)
	neg("prefill-shift-after", float64(c.PrefillShiftAfter))
	neg("prefill-shift-factor", c.PrefillShiftFactor)
	if c.PrefillShiftAfter > 0 && c.PrefillShiftFactor <= 0 {
		errs = append(errs, fmt.Errorf("prefill-shift-factor must be > 0 with prefill-shift-after, got %g", c.PrefillShiftFactor))
	}
	if c.EmbedDimensions != 0 && (c.EmbedDimensions < retrieval.MinHashDimension || c.EmbedDimensions > retrieval.MaxHashDimension) {
		errs = append(errs, fmt.Errorf("embed-dimensions must be between %d and %d, got %d", retrieval.MinHashDimension, retrieval.MaxHashDimension, c.EmbedDimensions))
	}
	if c.ITLJitter < 0 || c.ITLJitter > 1 {
		errs = append(errs, fmt.Errorf("itl-jitter must be between 0 and 1, got %g", c.ITLJitter))
	}
	switch c.Routing {
	case "", "round-robin", "prefix":
	default:
		errs = append(errs, fmt.Errorf("routing must be round-robin or prefix, got %q", c.Routing))
	}
	switch c.ReasoningField {
	case "", "reasoning_content", "reasoning":
	default:
		errs = append(errs, fmt.Errorf("reasoning-field must be reasoning_content or reasoning, got %q", c.ReasoningField))
	}
	if _, err := parseFaults(c.Faults); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ms converts float milliseconds to a Duration.
func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// Fault kinds, as named in Config.Faults and the X-Llmsim-Fault header.
const (
	FaultUnauthorized = "401"
	FaultNotFound     = "404"
	FaultRateLimited  = "429"
	FaultServerError  = "500"
	FaultStall        = "stall"
	FaultDrop         = "drop"
	FaultMalformed    = "malformed"
	FaultNoChoices    = "nochoices"
)

var faultKinds = []string{FaultUnauthorized, FaultNotFound, FaultRateLimited, FaultServerError, FaultStall, FaultDrop, FaultMalformed, FaultNoChoices}

type faultRate struct {
	kind string
	rate float64
}

// parseFaults reads "KIND=RATE,...".
func parseFaults(spec string) ([]faultRate, error) {
	var out []faultRate
	total := 0.0
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kind, rateText, ok := strings.Cut(part, "=")
		if !ok || !slices.Contains(faultKinds, kind) {
			return nil, fmt.Errorf("faults: %q is not KIND=RATE with KIND one of %v", part, faultKinds)
		}
		rate, err := strconv.ParseFloat(rateText, 64)
		if err != nil || rate < 0 || rate > 1 {
			return nil, fmt.Errorf("faults: rate of %s must be a number from 0 to 1, got %q", kind, rateText)
		}
		total += rate
		out = append(out, faultRate{kind, rate})
	}
	if total > 1 {
		return nil, fmt.Errorf("faults: rates add up to %g, more than 1", total)
	}
	return out, nil
}
