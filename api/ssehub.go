package api

// The /ask streams' hub: the running queries (run, runPlain), their
// options, and their end at shutdown (endAll).

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/pipeline"
)

// StreamOptions shape every /ask stream.
type StreamOptions struct {
	// WriteTimeout bounds the write and flush of one event: a client that
	// takes nothing for this long is cut, and its query cancelled as
	// client_stalled. 0 means 10 s. The connection's deadline is moved
	// only when less than WriteTimeout of it is left, to 1.5 × WriteTimeout
	// ahead (re-arming it per event cost a timer update per token), so a
	// stalled client is cut after between 1 and 1.5 × WriteTimeout.
	WriteTimeout time.Duration
	// Heartbeat is how long a stream may stay silent before a
	// ": keep-alive" comment is sent (proxies cut idle connections);
	// 0 sends none.
	Heartbeat time.Duration
	// Retry is the reconnection delay sent in the stream's retry: field. A
	// query whose client disconnected keeps running for twice as long,
	// waiting for it to resume with Last-Event-ID, before it is cancelled.
	// 0 means 2 s.
	Retry time.Duration
	// log receives the operator's side of a failed ask (callerFailure);
	// NewServer sets it.
	log *slog.Logger
	// BufferBytes bounds the events kept per running query for resumes;
	// the oldest are dropped beyond it. 0 means 1 MiB.
	BufferBytes int
	// Shared, when set, is where a running query's events also go once
	// its client has left, so that a reconnect landing on another replica
	// resumes there; nil keeps resumes on the replica running the query
	// (the local buffer, which also serves when the query runs here).
	Shared SharedStreams
}

// SharedStreams is a log of the running queries' events that every
// replica reads; redisstate.Store implements it.
type SharedStreams interface {
	// Publish starts query qid's log (asked with keyID): add sends event
	// seq as framed for the client, end marks the query finished. Neither
	// waits.
	Publish(qid, keyID string) (add func(seq int, frame []byte), end func())
	// Resume calls each with query qid's events after sequence after, then
	// with those that follow until the query ends, and with a nil frame
	// when there is nothing new (first when the query is found, then after
	// each quiet wait of every). found is false, and nothing called, when
	// the query is not running anywhere or keyID did not ask it.
	Resume(ctx context.Context, qid, keyID string, after int, every time.Duration, each func(seq int, frame []byte) error) (found bool, err error)
	// Attached reports whether a client follows query qid on some replica.
	Attached(ctx context.Context, qid string) (bool, error)
}

func (o *StreamOptions) defaults() {
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Retry <= 0 {
		o.Retry = 2 * time.Second
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = 1 << 20
	}
}

// streamHub holds the running queries' event logs: a reconnecting client
// resumes from one, and shutdown ends them all.
type streamHub struct {
	opts StreamOptions
	// retryLine is the stream's first line, "retry: <ms>\n\n", framed once.
	retryLine []byte
	mu        sync.Mutex
	byID      map[string]*eventLog // running queries that sent their meta event
	// chats holds the resumable chat streams (chatresume.go) that sent
	// their meta event, running or lingering.
	chats map[string]*chatStream
	// open holds every running stream's cancel, keyed by its *eventLog (or
	// another stream's own pointer), so shutdown can end them all.
	open map[any]context.CancelCauseFunc
	idle chan struct{} // closed when open empties; nil when nobody waits
}

func newStreamHub(opts StreamOptions) *streamHub {
	opts.defaults()
	return &streamHub{opts: opts, byID: map[string]*eventLog{}, chats: map[string]*chatStream{}, open: map[any]context.CancelCauseFunc{},
		retryLine: fmt.Appendf(nil, "retry: %d\n\n", opts.Retry.Milliseconds())}
}

// run answers one admitted ask as an SSE stream on c, from the handler's
// goroutine: it runs the query up to the model's answer and returns the
// rest (the answer, the record, the stream's end), which the caller runs as
// the request's tail (deferTail), when the router's frames have returned:
// the answer then parks in the model's stream on net/http's handler
// goroutine, near the top of its stack, and a held stream has no goroutine
// of ragtime's own (pipeline.Pipeline.Begin). The query's context is not
// the request's: a client that disconnects may resume (Last-Event-ID)
// within twice the retry delay, after which its query is cancelled.
func (h *streamHub) run(c echo.Context, asker Asker, req *pipeline.Request) (rest func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(c.Request().Context()))
	l := &eventLog{hub: h, cancel: cancel, keyID: req.KeyID, expect: min(req.MaxTokens, 128) + 24}
	h.mu.Lock()
	h.open[l] = cancel
	h.mu.Unlock()

	l.mu.Lock()
	sk := l.attachLocked(c.Response())
	l.mu.Unlock()
	stop := context.AfterFunc(c.Request().Context(), func() { l.detach(sk) })
	begun := false
	defer func() {
		if !begun { // a panic in the query's first part
			stop()
			cancel(nil)
		}
	}()
	if h.opts.Heartbeat > 0 {
		l.heartbeat(h.opts.Heartbeat)
	}
	answer := begin(ctx, asker, req, l)
	begun = true
	return func() {
		defer cancel(nil)
		defer stop()
		answer()
		l.end()
	}
}

// begin runs asker up to the model's answer, when it can run a query in
// two parts (Pipeline, TrackedAsker: see pipeline.Pipeline.Begin), and
// returns the rest; for any other Asker the rest is the whole of Run.
func begin(ctx context.Context, asker Asker, req *pipeline.Request, out pipeline.Stream) (answer func() *ragtime.Record) {
	if b, ok := asker.(beginner); ok {
		return b.Begin(ctx, req, out)
	}
	return func() *ragtime.Record { return asker.Run(ctx, req, out) }
}

// beginner is an Asker that runs a query in two parts:
// pipeline.Pipeline.Begin.
type beginner interface {
	Begin(ctx context.Context, req *pipeline.Request, out pipeline.Stream) (answer func() *ragtime.Record)
}

// runPlain answers one admitted ask on out, a stream that cannot be
// resumed (the OpenAI-compatible route: its clients do not reconnect). The
// query runs in the request's context, so a client that leaves cancels it
// at once; shutdown ends it as it ends the /ask streams.
func (h *streamHub) runPlain(c echo.Context, asker Asker, req *pipeline.Request, out pipeline.Stream) {
	ctx, cancel := context.WithCancelCause(c.Request().Context())
	defer cancel(nil)
	h.mu.Lock()
	h.open[out] = cancel
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.closeLocked(out)
		h.mu.Unlock()
	}()
	asker.Run(ctx, req, out)
}

// endAll cancels every open stream with cause (their clients are sent an
// error event) and waits until they have ended or ctx is done. It returns
// how many are still open.
func (h *streamHub) endAll(ctx context.Context, cause error) int {
	h.mu.Lock()
	for _, cancel := range h.open {
		cancel(cause)
	}
	if len(h.open) == 0 {
		h.mu.Unlock()
		return 0
	}
	if h.idle == nil {
		h.idle = make(chan struct{})
	}
	idle := h.idle
	h.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.open)
}

func (h *streamHub) remove(l *eventLog) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byID[l.id] == l {
		delete(h.byID, l.id)
	}
	h.closeLocked(l)
}

// linger keeps an ended query's events for a resume for as long as its
// client is waited for (twice the retry hint, as a running query's grace),
// then forgets them. The stream no longer counts as open for endAll.
func (h *streamHub) linger(l *eventLog) {
	h.mu.Lock()
	h.closeLocked(l)
	h.mu.Unlock()
	time.AfterFunc(2*h.opts.Retry, func() { h.remove(l) })
}

// closeLocked forgets the open stream key; the last one wakes endAll.
func (h *streamHub) closeLocked(key any) {
	delete(h.open, key)
	if len(h.open) == 0 && h.idle != nil {
		close(h.idle)
		h.idle = nil
	}
}
