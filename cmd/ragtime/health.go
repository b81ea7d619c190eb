package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runHealth checks a running ragtime's /readyz: it exits 0 when the answer
// is 200 and 1 otherwise. The container image has no shell or curl, so the
// compose healthcheck runs this.
func runHealth(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "health", "health [--url URL]")
	url := fs.String("url", "http://127.0.0.1:8080/readyz", "readiness URL to check")
	timeout := fs.Duration("timeout", 3*time.Second, "longest the check may take")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return &usageError{msg: fmt.Sprintf("--url %q: %v", *url, err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("checking %s: %w", *url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("checking %s: HTTP %d: %s", *url, resp.StatusCode, body)
	}
	fmt.Fprintf(env.stdout, "ok: %s\n", body)
	return nil
}
