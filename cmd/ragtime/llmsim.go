package main

import (
	"context"
	"errors"
	"flag"
	"strings"

	"ragtime/llm/sim/simcli"
)

// runLLMSim is `ragtime llmsim`: the simulator's own command (also built
// alone as cmd/llmsim), with ragtime's flag handling (RAGTIME_<FLAG>).
func runLLMSim(ctx context.Context, env *environment, args []string) error {
	err := simcli.Run(ctx, simcli.Env{
		Prog:   "ragtime llmsim",
		Getenv: env.getenv,
		Stdout: env.stdout,
		NewFlagSet: func(name, usage string) *flag.FlagSet {
			return newFlagSet(env, strings.TrimPrefix(name, "ragtime "), strings.TrimPrefix(usage, "ragtime "))
		},
		Parse: func(fs *flag.FlagSet, args []string) error { return parseFlags(fs, env, args) },
	}, args)
	if ue := (*simcli.UsageError)(nil); errors.As(err, &ue) {
		return &usageError{msg: ue.Msg}
	}
	return err
}
