package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServesUntilCancelled starts llmsim on a free loopback port, asks its
// models endpoint, and stops it by cancelling the context.
func TestServesUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--addr", "127.0.0.1:0"}, func(string) string { return "" }, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	const prefix = "llmsim (simulator) serving an OpenAI-compatible API on "
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("first line %q", line)
	}
	base := strings.TrimSpace(strings.TrimPrefix(line, prefix))
	resp, err := http.Get(base + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s/models: %d", base, resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestUsageErrorExitsTwo(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"load", "--mix", "nonsense"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "--mix") {
		t.Fatalf("err %v (exit %d), want a usage error naming --mix", err, exitCode(err))
	}
}
