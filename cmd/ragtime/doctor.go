package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"ragtime/llm"
)

// doctorConfig holds doctor's flags: the llm flags and --config.
type doctorConfig struct {
	configFile string
	llm        llmConfig
	timeout    time.Duration
}

func (c *doctorConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configFile, "config", "", "JSON or TOML file with an llm section (as for serve)")
	c.llm.register(fs)
	fs.DurationVar(&c.timeout, "check-timeout", 10*time.Second, "longest each network check may take")
}

// errDoctorFailed is returned when a check failed (exit status 1).
var errDoctorFailed = errors.New("doctor found a problem")

// printCheck writes one check as a line, and its hint below it.
func printCheck(w io.Writer, c llm.Check) {
	detail := c.Detail
	if c.Code != "" {
		detail = c.Code + ": " + detail
	}
	fmt.Fprintf(w, "%-5s %-14s %s\n", c.Status, c.Name, detail)
	if c.Hint != "" && c.Status != llm.CheckOK {
		fmt.Fprintf(w, "      %-14s hint: %s\n", "", c.Hint)
	}
}

// runDoctor checks the configuration, then the way to the LLM provider
// step by step (llm.Diagnose), and stops at the first failure.
func runDoctor(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "doctor", "doctor [flags]\n\n"+
		"Checks the key, base URL, proxy, DNS, TCP/TLS connection, the models listing and a 1-token streaming request.\n"+
		"A model missing from the listing is a warning (llama.cpp answers any name; Ollama's rnd is rnd:latest): the first-token request decides.")
	var cfg doctorConfig
	cfg.register(fs)
	sources, err := parseFlagSources(fs, env, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		printCheck(env.stdout, llm.Check{Name: "configuration", Status: llm.CheckFail, Detail: err.Error(), Hint: "fix the flag, RAGTIME_* variable or --config file named above"})
		return fmt.Errorf("%w: configuration", errDoctorFailed)
	}
	c := &cfg.llm
	from := "flags and defaults"
	if cfg.configFile != "" {
		from = "--config " + cfg.configFile
	}
	printCheck(env.stdout, llm.Check{Name: "configuration", Status: llm.CheckOK,
		Detail: fmt.Sprintf("loaded from %s: provider %s (%s), model %q (%s)", from, c.provider, sources["llm-provider"], c.model, sources["llm-model"])})
	if c.provider == "extractive" {
		printCheck(env.stdout, llm.Check{Name: "provider", Status: llm.CheckOK, Detail: "the extractive generator runs in-process: no network, no key, nothing more to check"})
		return nil
	}
	key, keyFrom := c.apiKey(env.getenv)
	checks := llm.Diagnose(ctx, llm.DiagnoseConfig{
		Provider: c.provider, CheckTimeout: cfg.timeout,
		Config: llm.Config{BaseURL: c.baseURL, Model: c.model, APIKey: key, KeyEnv: keyFrom,
			Timeout: c.timeout, TTFTTimeout: c.ttftTimeout, Getenv: env.getenv},
	})
	for _, ch := range checks {
		printCheck(env.stdout, ch)
		if ch.Status == llm.CheckFail {
			return fmt.Errorf("%w: %s", errDoctorFailed, ch.Name)
		}
	}
	return nil
}
