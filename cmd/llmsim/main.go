// Command llmsim is the OpenAI-compatible inference SIMULATOR on its own:
// it runs no model, and streams tokens on a configurable cost model (see
// docs/llmsim.md). `llmsim load` is its open-loop load generator. It is the
// same command as `ragtime llmsim`, without ragtime's RAGTIME_<FLAG>
// variables.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"ragtime/llm/sim/simcli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C stops at once
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "llmsim:", err)
		}
		os.Exit(exitCode(err))
	}
}

// run is the whole program, testable in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return simcli.Run(ctx, simcli.Env{
		Prog:   "llmsim",
		Getenv: getenv,
		Stdout: stdout,
		NewFlagSet: func(name, usage string) *flag.FlagSet {
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			fs.SetOutput(stderr)
			fs.Usage = func() {
				fmt.Fprintf(stderr, "Usage: %s\n\nFlags:\n", usage)
				fs.PrintDefaults()
			}
			return fs
		},
	}, args)
}

// exitCode is 2 for usage errors, 1 for everything else.
func exitCode(err error) int {
	var ue *simcli.UsageError
	if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}
