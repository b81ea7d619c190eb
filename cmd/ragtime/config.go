package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"text/tabwriter"

	"ragtime/llm"
	"ragtime/postgres"
	"ragtime/tracing"
)

// runConfig prints the effective configuration of `ragtime serve` (the
// same flags, variables and --config file) and where each value came from.
func runConfig(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "config", "config [serve's flags]")
	var cfg serveConfig
	cfg.register(fs)
	sources, err := parseFlagSources(fs, env, args)
	if err != nil {
		return err
	}
	cfg.sources = sources
	// The endpoint and protocol traces really go to, whichever setting
	// chose them (OTEL_* variables included).
	target, err := tracing.Resolve(cfg.tracingConfig(env, nil))
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tFROM")
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		switch f.Name {
		case "database-url":
			v = postgres.RedactURL(v)
		case "llm-base-url", "embed-base-url", "rerank-url", "redis-url":
			if u, err := url.Parse(v); err == nil {
				v = u.Redacted()
			}
		}
		from := sources[f.Name]
		switch f.Name {
		case "otlp-endpoint":
			v, from = target.Endpoint, target.EndpointFrom
		case "otlp-protocol":
			if target.Endpoint != "" {
				v, from = target.Protocol, target.ProtocolFrom
			}
		}
		if v == "" {
			v = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Name, v, from)
	})
	key, from := cfg.parts.llm.apiKey(env.getenv)
	shown := "(not set)"
	if key != "" {
		shown = llm.MaskKey(key)
	}
	fmt.Fprintf(tw, "api key\t%s\tenv %s\n", shown, from)
	return tw.Flush()
}
