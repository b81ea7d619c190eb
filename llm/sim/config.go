package sim

import (
	"errors"
	"flag"
	"fmt"
	"time"
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
	// ITLMs is the inter-token latency of decode, in milliseconds.
	ITLMs float64
	// OutputTokens is the answer length in tokens (words) when the request's
	// max_tokens is not smaller.
	OutputTokens int

	// Seed makes the generated text differ between simulators; the same seed
	// and prompt always give the same text.
	Seed int64
	// MaxBodyBytes bounds a request body (0 means 8 MiB).
	MaxBodyBytes int64
}

// DefaultConfig returns the configuration the flags default to: costs
// roughly those of a 7B-class model on one data-centre GPU (see docs/llmsim.md).
func DefaultConfig() Config {
	return Config{
		Encoding:          "o200k_base",
		PrefillMs:         15,
		PrefillMsPerToken: 0.08,
		ITLMs:             15,
		OutputTokens:      128,
		MaxBodyBytes:      8 << 20,
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
	fs.Float64Var(&c.ITLMs, "itl-ms", c.ITLMs, "inter-token latency of decode, in milliseconds between output tokens")
	fs.IntVar(&c.OutputTokens, "output-tokens", c.OutputTokens, "output length in tokens (words) when the request's max_tokens is not smaller")
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
	neg("output-tokens", float64(c.OutputTokens))
	neg("max-body-bytes", float64(c.MaxBodyBytes))
	return errors.Join(errs...)
}

// ms converts float milliseconds to a Duration.
func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
