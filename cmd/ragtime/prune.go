package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"ragtime/postgres"
)

// runPrune deletes stored queries older than --older-than, with their stages.
func runPrune(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "prune", "prune --older-than 30d [flags]")
	var db dbConfig
	db.register(fs)
	var age ageFlag
	fs.Var(&age, "older-than", "delete queries created longer ago than this: a number of days (30d) or a Go duration (36h, 90m); required")
	batch := fs.Int("batch", 10000, "queries deleted per transaction, so that no lock is held for long")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if age == 0 {
		return &usageError{msg: "--older-than is required, e.g. --older-than 30d"}
	}
	if *batch <= 0 {
		return &usageError{msg: fmt.Sprintf("--batch must be at least 1, got %d", *batch)}
	}
	pool, err := db.open(ctx, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	cutoff := time.Now().Add(-time.Duration(age))
	start := time.Now()
	n, err := postgres.NewStore(pool).Prune(ctx, cutoff, *batch)
	fmt.Fprintf(env.stdout, "pruned %d queries created before %s in %s\n", n, cutoff.UTC().Format(time.RFC3339), time.Since(start).Round(time.Millisecond))
	return err
}

// ageFlag is a positive age: "30d" (days, which time.ParseDuration lacks)
// or any Go duration.
type ageFlag time.Duration

func (a *ageFlag) String() string { return time.Duration(*a).String() }

func (a *ageFlag) Set(v string) error {
	d, err := parseAge(v)
	if err != nil {
		return err
	}
	*a = ageFlag(d)
	return nil
}

// parseAge reads "30d", "1.5d" or a Go duration ("36h"); it must be positive.
func parseAge(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil {
			return 0, fmt.Errorf("want a number of days like 30d or a duration like 36h, got %q", v)
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, fmt.Errorf("want a number of days like 30d or a duration like 36h, got %q", v)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %q", v)
	}
	return d, nil
}
