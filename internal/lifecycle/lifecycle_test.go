package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestStepsStopInReverseAndOnlyWhatStarted(t *testing.T) {
	t.Parallel()
	var got []string
	step := func(name string, fail bool) Step {
		return Step{Name: name,
			Start: func(context.Context) error {
				got = append(got, "start "+name)
				if fail {
					return errors.New(name + " failed")
				}
				return nil
			},
			Stop: func() { got = append(got, "stop "+name) }}
	}
	s := New(step("a", false), Step{Name: "no stop"}, step("b", false), step("c", true), step("d", false))
	err := s.Open(context.Background())
	if err == nil || err.Error() != "c failed" {
		t.Fatalf("Open = %v, want c's error", err)
	}
	want := []string{"start a", "start b", "start c", "stop b", "stop a"}
	if !slices.Equal(got, want) {
		t.Fatalf("steps ran %q, want %q", got, want)
	}
	s.Close() // stopped already: nothing more
	if !slices.Equal(got, want) {
		t.Fatalf("a second Close ran %q", got[len(want):])
	}
}

func TestStepsCloseLogsEachStepInShutdownOrder(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	stop := func() {}
	skip := func(context.Context) error { return ErrSkipped }
	s := New(Step{Name: "database", Stop: stop}, Step{Name: "recorder", Stop: stop}, Step{Name: "banner"},
		Step{Name: "profiler", Start: skip, Stop: func() { t.Error("a skipped step was stopped") }})
	s.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	out := buf.String()
	r, d := strings.Index(out, "step=recorder"), strings.Index(out, "step=database")
	if r < 0 || d < 0 || r > d || strings.Contains(out, "banner") || strings.Contains(out, "profiler") {
		t.Fatalf("shutdown log does not stop recorder, then database (and nothing for a step without Stop or skipped):\n%s", out)
	}
	if !slices.Equal(s.Names(), []string{"database", "recorder", "banner", "profiler"}) {
		t.Fatalf("Names = %q", s.Names())
	}
}
