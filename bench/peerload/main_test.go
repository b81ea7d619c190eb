package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseFlagsTargetsAndHold(t *testing.T) {
	t.Parallel()
	base := []string{"-sim", "http://127.0.0.1:1/v1", "-ragtime", "http://127.0.0.1:2"}
	c, err := parseFlags(append(base, "-targets", "ragtime", "-hold", "2000"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.targets, []string{"llmsim", "ragtime"}) || c.has("peer") || c.hold.streams != 2000 {
		t.Errorf("targets %v hold %d", c.targets, c.hold.streams)
	}
	if c, err := parseFlags(append(base, "-targets", "ragtime", "-stagger", "335ms")); err != nil {
		t.Errorf("-stagger 335ms: %v", err)
	} else if c.stagger.Milliseconds() != 335 {
		t.Errorf("-stagger 335ms parsed as %s", c.stagger)
	}
	// Without the peer among the targets its URL is not needed; with it, it is.
	if _, err := parseFlags(base); err == nil || !strings.Contains(err.Error(), "-peer") {
		t.Errorf("default targets without -peer: %v, want an error naming -peer", err)
	}
	for _, bad := range [][]string{
		{"-targets", "ragtime,langchain"},
		{"-hold", "-1"},
		{"-hold", "10", "-hold-probes", "0"},
		{"-targets", "ragtime", "-stagger", "-1ms"},
		{"-targets", "ragtime", "-stagger", "11s"},
	} {
		if _, err := parseFlags(append(base, bad...)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
