package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"ragtime/llm/sim"
)

// TestServeWaitsForALateEmbedder: serve started before its embedding server
// (compose starts them at once) waits for it to learn the embedding
// dimension, says in the log what it waits for, and serves once it is up;
// an embedder that never comes up fails serve after --embed-wait, naming
// the flag. Before, serve exited at once with "connection refused".
func TestServeWaitsForALateEmbedder(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the embedder comes up
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	var out, errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--reload-interval", "0", "--data-dir", t.TempDir(),
			"--embedder", "openai", "--embed-base-url", "http://" + addr + "/v1", "--embed-model", "sim-embed"}, envMap(env), &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v\nstderr:\n%s", err, errOut.String())
			}
		case <-time.After(30 * time.Second): // or it had exited, reported by waitFor
		}
	})
	// serve says what it waits for; only then does the embedder come up.
	waitFor(t, "serve to wait for the embedder", done, &errOut, func(log string) bool {
		return strings.Contains(log, "waiting for the embedding server") && strings.Contains(log, addr)
	})
	s, err := sim.New(sim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the late embedder could not listen on %s: %v", addr, err)
	}
	hs := &http.Server{Handler: s}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { hs.Close(); s.Close() })
	waitFor(t, "serve to listen", done, &out, func(o string) bool { return servingRE.MatchString(o) })
	lastDone(t, ask(t, servingRE.FindStringSubmatch(out.String())[1], "q=what+makes+prefill+slow"))

	// One that never comes up: serve gives up after --embed-wait.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	never := ln.Addr().String()
	ln.Close()
	var out2, errOut2 syncBuffer
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	start := time.Now()
	err = run(ctx2, []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--embed-wait", "1s",
		"--embedder", "openai", "--embed-base-url", "http://" + never + "/v1", "--embed-model", "sim-embed"}, envMap(env), &out2, &errOut2)
	if err == nil || !strings.Contains(err.Error(), "--embed-wait") || !strings.Contains(err.Error(), never) {
		t.Errorf("serve with an embedder that never answers: %v", err)
	}
	if took := time.Since(start); took < time.Second || took > 20*time.Second {
		t.Errorf("serve gave up after %v, want about --embed-wait 1s", took)
	}
}

// waitFor polls buf until cond holds of it, failing the test if serve
// exits first or 20 s pass.
func waitFor(t *testing.T, what string, done <-chan error, buf *syncBuffer, cond func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond(buf.String()) {
		select {
		case err := <-done:
			t.Fatalf("serve exited before %s: %v\n%s", what, err, buf.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s:\n%s", what, buf.String())
		}
	}
}
