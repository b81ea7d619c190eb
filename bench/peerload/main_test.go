package main

import (
	"os"
	"path/filepath"
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
		{"-targets", "ragtime,relay"}, // the relay's URL is missing
		{"-targets", "ragtime", "-hold", "10", "-hold-target", "peer"},
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

// TestSyscallsCountsWrites: the counts come from /proc/<pid>/io and move
// with the process's own writes.
func TestSyscallsCountsWrites(t *testing.T) {
	t.Parallel()
	_, w0 := syscalls(os.Getpid())
	if err := os.WriteFile(filepath.Join(t.TempDir(), "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, w1 := syscalls(os.Getpid()); w1 <= w0 {
		t.Errorf("write system calls %d after a write, %d before", w1, w0)
	}
	if r, w := syscalls(0); r != 0 || w != 0 {
		t.Errorf("pid 0: %d, %d", r, w)
	}
}
