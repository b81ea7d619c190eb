// Command ragtime answers questions over your documents and shows where the
// time to the first token went. See `ragtime help`.
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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first Ctrl-C asks for a graceful stop (serve lets open streams
	// finish for --shutdown-timeout); restoring the default handling then
	// makes a second Ctrl-C stop the process at once, as people expect.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "ragtime:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for usage errors, 1 for everything else.
func exitCode(err error) int {
	var ue *usageError
	if errors.As(err, &ue) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *environment, args []string) error
}

// environment is what every subcommand gets from the process.
type environment struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

func commands() []command {
	return []command{
		{"serve", "serve /ask, the API, /metrics and the pages (migrates first)", runServe},
		{"ingest", "index files and folders into the data dir", runIngest},
		{"compact", "fold the embedded index's log into a new snapshot and reclaim deleted chunks", runCompact},
		{"migrate", "apply the SQL migrations to the database", runMigrate},
		{"keys", "create, list and revoke API keys (the secret is printed once)", runKeys},
		{"prune", "delete stored queries older than --older-than (e.g. 30d)", runPrune},
		{"eval", "measure retrieval quality (hit@k, MRR, nDCG) and latency of a running serve on labelled questions", runEval},
		{"sweep", "measure top-k (and context budget) against TTFT and recall; chart it, recommend a setting", runSweep},
		{"config", "print the effective configuration and where each value came from", runConfig},
		{"doctor", "check the LLM provider step by step (key, URL, proxy, DNS, connect, models, first token)", runDoctor},
		{"ttft", "measure the provider's time to first token over repeated streaming requests", runTTFT},
		{"llmsim", "run the OpenAI-compatible inference SIMULATOR (no model, no GPU)", runLLMSim},
		{"health", "check a running ragtime's /readyz (for container healthchecks)", runHealth},
	}
}

// run is the whole program, testable in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	env := &environment{getenv: getenv, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		if len(args) == 0 {
			return &usageError{msg: "no command given"}
		}
		return nil
	}
	var names []string
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, env, args[1:])
		}
		names = append(names, c.name)
	}
	printUsage(stderr)
	return &usageError{msg: unknownName("command", args[0], names)}
}

// unknownName is the message for a mistyped command or subcommand: what
// was given, and the nearest of names if one is near.
func unknownName(what, got string, names []string) string {
	msg := fmt.Sprintf("unknown %s %q", what, got)
	if near := closestName(got, names); near != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", near)
	}
	return msg
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "ragtime: RAG over your documents, with every query's time to first token broken down by stage.")
	fmt.Fprintln(w, "\nUsage: ragtime <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `ragtime <command> -h` for a command's flags. Every flag can also be set with the")
	fmt.Fprintln(w, "environment variable RAGTIME_<FLAG> (upper case, dashes as underscores), and the llm flags")
	fmt.Fprintln(w, "from a --config FILE (JSON or TOML); flags win over variables, variables over the file.")
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
