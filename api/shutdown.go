package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"ragtime"
	"ragtime/pipeline"
)

// CutStreamsWait bounds how long Serve waits, after cutting the open
// streams, for their queries to finish and be recorded.
const CutStreamsWait = 5 * time.Second

// ServeOptions configure Serve.
type ServeOptions struct {
	// ShutdownTimeout is how long open streams may take to finish once the
	// context ends, before they are cut.
	ShutdownTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (0: never).
	IdleTimeout time.Duration
	// Queries, when set, is waited for after the streams are cut (up to
	// CutStreamsWait), so that their records reach the recorder before the
	// caller closes it.
	Queries *TrackedAsker
	// Logger receives the shutdown's progress; nil means slog.Default().
	Logger *slog.Logger
}

// Serve serves h on ln until ctx ends, then shuts down: no new
// connections, open streams may finish within opts.ShutdownTimeout, then
// are ended with an error event server_shutdown and cut, and the queries
// they ran are waited for. It returns nil after a
// shutdown, or the error that stopped the server first.
func Serve(ctx context.Context, ln net.Listener, h *Server, opts ServeOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	// No ReadTimeout or WriteTimeout: they would cut long streams. Bodies
	// get Deps.BodyTimeout and stream events Stream.WriteTimeout, per
	// request, in the handler. Each request's arrival (when its first byte
	// reached the socket) reaches the pipeline through the context: see
	// arrival.go.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: opts.IdleTimeout,
		ConnContext: connContext}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(newArrivalListener(ln)) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: no new connections; open streams may finish (a second Ctrl-C stops at once)", "deadline", opts.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("open streams did not finish in time; ending them with a server_shutdown error event", "err", err)
		ectx, ecancel := context.WithTimeout(context.Background(), CutStreamsWait)
		if n := h.EndStreams(ectx); n > 0 {
			log.Warn("streams still open after their server_shutdown event; closing their connections", "open", n)
		}
		ecancel()
		_ = srv.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("server stopped with an error", "err", err)
	}
	// Close does not wait for handlers: the queries of the streams it cut
	// are still finishing (their contexts are cancelled, so briefly). Wait
	// for them, so their records reach the recorder before it closes and
	// no search runs on a closed store.
	if opts.Queries != nil {
		wctx, wcancel := context.WithTimeout(context.Background(), CutStreamsWait)
		if !opts.Queries.Wait(wctx) {
			log.Warn("queries still running after shutdown; their records may be lost", "running", opts.Queries.Running())
		}
		wcancel()
	}
	return nil
}

// TrackedAsker counts the queries running through an Asker, so that
// shutdown can wait for them. Hand-written rather than a sync.WaitGroup
// because handlers the server accepted before it closed may still start a
// query while shutdown waits, which a WaitGroup forbids.
type TrackedAsker struct {
	next Asker

	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil when nobody waits
}

// Track returns next, counted.
func Track(next Asker) *TrackedAsker { return &TrackedAsker{next: next} }

// Run runs the query through the tracked Asker, counted.
func (a *TrackedAsker) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	defer a.done()
	return a.next.Run(ctx, req, out)
}

// Begin runs the query's first part through the tracked Asker (Run, for
// one that cannot run a query in two parts: see
// pipeline.Pipeline.Begin) and returns the rest; the query is counted
// until the rest returns.
func (a *TrackedAsker) Begin(ctx context.Context, req *pipeline.Request, out pipeline.Stream) (answer func() *ragtime.Record) {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	begun := false
	defer func() {
		if !begun { // a panic in the query's first part
			a.done()
		}
	}()
	rest := begin(ctx, a.next, req, out)
	begun = true
	return func() *ragtime.Record {
		defer a.done()
		return rest()
	}
}

// done counts a query out.
func (a *TrackedAsker) done() {
	a.mu.Lock()
	a.n--
	if a.n == 0 && a.idle != nil {
		close(a.idle)
		a.idle = nil
	}
	a.mu.Unlock()
}

// Wait blocks until no query runs or ctx ends; it reports whether none runs.
func (a *TrackedAsker) Wait(ctx context.Context) bool {
	a.mu.Lock()
	if a.n == 0 {
		a.mu.Unlock()
		return true
	}
	if a.idle == nil {
		a.idle = make(chan struct{})
	}
	idle := a.idle
	a.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// Running is the number of queries running now.
func (a *TrackedAsker) Running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}
