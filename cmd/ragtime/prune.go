package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"ragtime/postgres"
)

// runPrune deletes stored queries older than --older-than, with their
// stages: whole day partitions are dropped, the rest deleted in batches. It first says what will go (counts and cutoff); --dry-run stops
// there.
func runPrune(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "prune", "prune --older-than 30d [--dry-run] [flags]")
	var db dbConfig
	db.register(fs)
	var age ageFlag
	fs.Var(&age, "older-than", "delete queries created longer ago than this: a number with h (hours), d (days) or w (weeks), e.g. 36h, 30d, 2w; required")
	batch := fs.Int("batch", 10000, "queries deleted per transaction in the day the cutoff falls in (older days are dropped whole), so that no lock is held for long")
	dryRun := fs.Bool("dry-run", false, "only count what would be deleted; delete nothing")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if age == 0 {
		return &usageError{msg: "--older-than is required, e.g. --older-than 30d (units: h, d, w)"}
	}
	if *batch <= 0 {
		return &usageError{msg: fmt.Sprintf("--batch must be at least 1, got %d", *batch)}
	}
	pool, err := db.open(ctx, true)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := postgres.NewStore(pool)
	cutoff := time.Now().Add(-time.Duration(age))
	when := cutoff.UTC().Format(time.RFC3339)
	queries, stages, err := store.CountOlder(ctx, cutoff)
	if err != nil {
		return err
	}
	if *dryRun {
		fmt.Fprintf(env.stdout, "dry run: would delete %d queries (%d stages) created before %s (older than %s); nothing deleted\n", queries, stages, when, age.String())
		return nil
	}
	fmt.Fprintf(env.stdout, "deleting %d queries (%d stages) created before %s (older than %s)\n", queries, stages, when, age.String())
	start := time.Now()
	res, err := store.Prune(ctx, cutoff, *batch)
	if err != nil {
		fmt.Fprintf(env.stdout, "pruning stopped after %s: %d whole days dropped, %d queries deleted\n",
			time.Since(start).Round(time.Millisecond), len(res.DroppedDays), res.Deleted)
		return err
	}
	// Every query counted above is gone (a day partition is dropped without
	// counting its rows again).
	fmt.Fprintf(env.stdout, "pruned %d queries created before %s in %s: %d whole days dropped%s, %d queries deleted from the day the cutoff falls in; %d retrieval-only searches deleted\n",
		queries, when, time.Since(start).Round(time.Millisecond), len(res.DroppedDays), daysList(res.DroppedDays), res.Deleted, res.Searches)
	return nil
}

// daysList formats dropped days as " (first … last)", or "" for none.
func daysList(days []time.Time) string {
	switch len(days) {
	case 0:
		return ""
	case 1:
		return " (" + days[0].Format(time.DateOnly) + ")"
	}
	return " (" + days[0].Format(time.DateOnly) + " … " + days[len(days)-1].Format(time.DateOnly) + ")"
}

// ageFlag is a positive age written with an unambiguous unit: h, d or w.
type ageFlag time.Duration

// String prints the age in the largest unit that divides it (30d, 36h).
func (a *ageFlag) String() string {
	d := time.Duration(*a)
	switch {
	case d == 0:
		return "0"
	case d%(7*24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(7*24*time.Hour)), 10) + "w"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

func (a *ageFlag) Set(v string) error {
	d, err := parseAge(v)
	if err != nil {
		return err
	}
	*a = ageFlag(d)
	return nil
}

// ageUnits are the units parseAge accepts. "m" is not one of them: it reads
// as minutes to Go and as months to people, and a prune must not guess.
var ageUnits = map[string]time.Duration{"h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour}

var agePattern = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$`)

// parseAge reads "36h", "30d", "1.5d" or "2w"; it must be positive.
func parseAge(v string) (time.Duration, error) {
	const want = "want a positive number with a unit h (hours), d (days) or w (weeks), like 30d, got %q%s"
	m := agePattern.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return 0, fmt.Errorf(want, v, "")
	}
	unit, ok := ageUnits[m[2]]
	if !ok {
		note := ""
		if strings.EqualFold(m[2], "m") || strings.EqualFold(m[2], "mo") {
			note = " (m could mean minutes or months)"
		}
		return 0, fmt.Errorf(want, v, note)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf(want, v, "")
	}
	return time.Duration(n * float64(unit)), nil
}
