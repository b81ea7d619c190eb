package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"ragtime/llm/sim"
)

func runLLMSim(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "llmsim", "llmsim [flags]\n\nAn OpenAI-compatible inference SIMULATOR: it runs no model. It streams tokens on a\nconfigurable cost model so TTFT effects can be explored without a GPU or an API key.")
	addr := fs.String("addr", ":8081", "address to listen on (host:port; port 0 picks a free one)")
	cfg := sim.DefaultConfig()
	cfg.RegisterFlags(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	s, err := sim.New(cfg)
	if err != nil {
		return fmt.Errorf("llmsim: %w", err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on --addr %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(env.stdout, "llmsim (simulator) serving an OpenAI-compatible API on http://%s/v1\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("llmsim: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
