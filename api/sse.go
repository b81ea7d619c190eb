package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/auth"
	"ragtime/internal/jsonappend"
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

// Names of the /ask stream's events, shared by the writer and the Client.
const (
	EventMeta      = "meta"
	EventStage     = "stage"
	EventSources   = "sources"
	EventToken     = "token"
	EventReasoning = "reasoning"
	EventDone      = "done"
	EventError     = "error"
)

// sourcesEvent is the sources event's body.
type sourcesEvent struct {
	Sources []pipeline.Source `json:"sources"`
}

var (
	headerEventStream = []string{"text/event-stream; charset=utf-8"}
	headerNoCache     = []string{"no-cache"}
	headerNo          = []string{"no"}
)

// keepAlive is the heartbeat: an SSE comment, which clients ignore.
var keepAlive = []byte(": keep-alive\n\n")

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

// resume serves a request carrying Last-Event-ID: the events after it of a
// query still running here, then the rest of the stream as it comes; or,
// for a query that finished while its client was away and is still kept
// (linger), the rest of its events. A query that is not running (finished
// with its client there, cancelled, or never here) is answered 204 No Content, which stops an EventSource for good; the model
// is never asked again. Only the key that asked may resume a query.
func (h *streamHub) resume(c echo.Context, lastEventID string) error {
	qid, seq, ok := parseEventID(lastEventID)
	if !ok {
		return badRequest("Last-Event-ID", "last_event_id_invalid",
			fmt.Sprintf("Last-Event-ID %.80q is not an id this server sent (query_id:sequence)", lastEventID))
	}
	h.mu.Lock()
	l := h.byID[qid]
	h.mu.Unlock()
	caller, _ := auth.CallerFrom(c.Request().Context())
	if l == nil && h.opts.Shared != nil {
		return h.resumeShared(c, qid, seq, caller.KeyID())
	}
	if l == nil || l.keyID != caller.KeyID() {
		return c.NoContent(http.StatusNoContent)
	}
	l.mu.Lock()
	if l.gone != nil || (l.ended && seq >= l.seq-1) {
		// Cancelled, or ended and the client has seen its last event (done
		// or error), here or through another replica.
		l.mu.Unlock()
		return c.NoContent(http.StatusNoContent)
	}
	if l.ended {
		// The answer finished while its client was away (linger): hand
		// over the rest of it, done included, and end the stream.
		sk := l.resumeLocked(c.Response(), seq)
		if l.sink == sk {
			l.sink = nil
			close(sk.done)
		}
		l.mu.Unlock()
		sk.release()
		return nil
	}
	sk := l.resumeLocked(c.Response(), seq)
	l.mu.Unlock()
	stop := context.AfterFunc(c.Request().Context(), func() { l.detach(sk) })
	defer stop()
	// The query's goroutine writes to this response until it detaches the
	// sink; the handler must not return before.
	<-sk.done
	sk.release()
	return nil
}

// errGap stops a shared resume whose events have a hole.
var errGap = errors.New("events missing from the shared stream")

// resumeShared serves a resume of a query that does not run here from the
// shared log: its events after seq, then the rest as the replica running
// it sends them, until its end. A query not running anywhere, or not
// asked by this key, or a shared log that cannot be read (Redis
// unavailable: resumes are then local only), is answered 204 as without a
// shared log.
func (h *streamHub) resumeShared(c echo.Context, qid string, seq int, keyID string) error {
	return h.resumeSharedAs(c, qid, seq, keyID, askErrorFrame)
}

// resumeSharedAs is resumeShared with a stream's error events framed by
// errFrame (the chat door's are OpenAI error chunks).
func (h *streamHub) resumeSharedAs(c echo.Context, qid string, seq int, keyID string,
	errFrame func(qid string, seq int, code, msg string) []byte) error {
	var conn streamConn
	started := false
	next := seq + 1
	found, err := h.opts.Shared.Resume(c.Request().Context(), qid, keyID, seq, h.opts.Retry, func(n int, frame []byte) error {
		if !started {
			conn = h.startStream(c.Response())
			started = true
			return conn.write(nil, true)
		}
		if frame == nil {
			if h.opts.Heartbeat > 0 && beatAfter(h.opts.Heartbeat, conn.lastWrite) == 0 {
				return conn.write(keepAlive, true)
			}
			return nil
		}
		if n != next {
			_ = conn.write(errFrame(qid, n-1, "resume_gap",
				fmt.Sprintf("events %d to %d of this query are no longer held; ask again", next, n-1)), true)
			return errGap
		}
		next++
		return conn.write(frame, true)
	})
	if !found {
		return c.NoContent(http.StatusNoContent)
	}
	if err != nil && !errors.Is(err, errGap) && c.Request().Context().Err() == nil {
		// The log stopped before the query's end (its replica went away,
		// or Redis did): say so rather than leave the client waiting.
		_ = conn.write(errFrame(qid, next-1, "stream_lost", "the replica answering this query stopped sending its events; ask again"), true)
	}
	conn.release()
	return nil
}

// gapEvent is the error event saying events from to to-1 of query qid are
// no longer held.
func gapEvent(qid string, from, to int) []byte {
	data, _ := json.Marshal(ragtime.Error{Code: ragtime.CodeResumeGap,
		Message: fmt.Sprintf("events %d to %d of this query are no longer held; ask again", from, to-1)})
	return fmt.Appendf(nil, "id: %s:%d\nevent: %s\ndata: %s\n\n", qid, to-1, EventError, data)
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

// parseEventID splits "query_id:sequence".
func parseEventID(id string) (string, int, bool) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return "", 0, false
	}
	seq, err := strconv.Atoi(id[i+1:])
	if err != nil || seq < 0 {
		return "", 0, false
	}
	return id[:i], seq, true
}

// eventLog is one query's stream. It implements pipeline.Stream: each event
// gets an id (query id and sequence), is kept in a bounded buffer for
// resumes, and is written and flushed to the current connection (the sink)
// before the method returns, under a write deadline.
type eventLog struct {
	hub    *streamHub
	cancel context.CancelCauseFunc
	keyID  string // the API key that asked ("" without one)
	// expect is how many events the stream is expected to send (a token
	// per answer token and about 24 others): kept's capacity, allocated
	// once rather than grown through a dozen copies. Capped at 152 (3.6
	// KB), so that a short answer to a large max_tokens does not hold
	// room for a long one; a longer answer grows it.
	expect int

	mu  sync.Mutex
	id  string
	seq int // the next event's sequence number
	// kept holds the latest events for resumes, oldest first: kept[0] is
	// sequence first; keptBytes is their size as framed.
	kept      []keptEvent
	first     int
	keptBytes int
	// texts holds the kept token and reasoning texts one after the other
	// (texts[0] is byte textsGone of all the stream's texts): one buffer
	// rather than a string and a 16-byte header per token. textsFront is
	// where the first kept text event's text starts (of all the stream's
	// texts; where the next text will, when none is kept); each next one's
	// starts where the one before ends.
	texts      []byte
	textsGone  int
	textsFront int
	// framed holds the kept keptFramed events' bytes, oldest first: the
	// first kept keptFramed event's is framed[0], and so on.
	framed  []string
	sources []pipeline.Source // the sources event's, when it is kept
	// stages are the spans of the kept stage events, oldest first, as
	// framed is.
	stages []pipeline.StageSpan
	// done is the done event's, when it is kept: framed again for a resume
	// that comes between it and the stream's end, rather than held framed
	// (1.5 KB copied per ask for a resume that seldom comes).
	done *ragtime.DoneEvent
	// meta is the meta event's, when it is kept, framed again as done is.
	meta *pipeline.Meta
	// scratch frames the event being written. Its buffer is taken from
	// smallScratch (largeScratch for the sources and done events) for the
	// event and handed back once the event is written, so that a held
	// stream holds none (0.5 KB each in make bench-streams); box is the
	// pointer it goes back in, kept so that handing it back allocates
	// nothing.
	scratch bytes.Buffer
	box     *[]byte
	sink    *sink       // nil while no client is attached
	grace   *time.Timer // runs while detached, waiting for a resume
	beat    *time.Timer // the heartbeat's; stopped at the end
	gone    error       // set once the query is being cancelled
	ended   bool
	// publish and unpublish send each event to, and end, the query's
	// shared log (StreamOptions.Shared); nil without one, and until the
	// client first leaves (publishKeptLocked).
	publish   func(seq int, frame []byte)
	unpublish func()
}

// keptEvent is an event held for resumes, in as little as framing it
// again byte for byte takes: a token or reasoning event keeps its text
// (in eventLog.texts), the sources event nothing of its own
// (eventLog.sources, whose texts are the store's), a stage event its span
// (eventLog.stages: its attrs are the query's, kept for the record), the
// meta and done events nothing of their own (eventLog.meta, .done: the
// meta event framed took 0.3 KB, the Meta 128 bytes), any other event its
// framed bytes (eventLog.framed). For a 64-token answer that is about 5 KB
// rather than the 18 KB its framed events took (7 KB of it the sources'),
// for as long as the stream is open; the nine stage events framed took
// 1.6 KB of it before their spans were kept instead (make bench-streams).
//
// A keptEvent is 8 bytes and its text is in eventLog.texts: with the
// token's string and the 24-byte event kept instead, a 64-token answer's
// events took 2.3 KB and its strings 1 KB more for as long as the stream
// is open (make bench-streams), and with 16-byte events (which placed
// their text, span or framed bytes themselves) 1.4 KB. Where a kept
// event's text, span or framed bytes are follows from the kept events
// before it (keptCursor).
type keptEvent struct {
	kind keptKind
	n    uint16 // a token's or reasoning's text's length in bytes
	size int32  // framed bytes, for StreamOptions.BufferBytes
}

// keptCursor places kept events' contents as the kept events are walked
// oldest first: text is where the next text event's text starts (of all
// the stream's texts), stage and framed the next stage's and keptFramed
// event's index in eventLog.stages and eventLog.framed.
type keptCursor struct{ text, stage, framed int }

// keptCursor is the cursor at the first kept event.
func (l *eventLog) keptCursor() keptCursor { return keptCursor{text: l.textsFront} }

// pass moves c past kept event e.
func (c *keptCursor) pass(e keptEvent) {
	switch e.kind {
	case keptToken, keptReasoning:
		c.text += int(e.n)
	case keptStage:
		c.stage++
	case keptFramed:
		c.framed++
	}
}

// maxKeptText is the longest text a kept token or reasoning event keeps
// in eventLog.texts; a longer one is kept framed.
const maxKeptText = math.MaxUint16

// keptKind says how a keptEvent is framed again.
type keptKind uint8

const (
	keptFramed keptKind = iota
	keptToken
	keptReasoning
	keptSources
	keptStage
	keptDone
	keptMeta
)

// maxScratch is the largest scratch buffer an eventLog keeps between
// events: a token's or a stage's fits.
const maxScratch = 1 << 10

// stageFrameBytes is room for a stage event with a few attrs, besides its
// id: most fit, a larger one grows the scratch as it is framed.
const stageFrameBytes = 256

// sink is one connection receiving a stream.
type sink struct {
	conn streamConn
	done chan struct{} // closed when it receives no more events
	err  error         // the write error that detached it, if any
}

// release readies the connection for what the server writes after the
// handler (see streamConn.release), unless a write on it failed.
func (s *sink) release() {
	if s.err == nil {
		s.conn.release()
	}
}

// attachLocked makes w the stream's connection: headers, then the retry
// hint (sent with the first event's flush). No "Connection: keep-alive":
// HTTP/1.1 keeps the connection without it and HTTP/2 forbids it, and
// with it a stream's response had nine headers, one past what a Go map
// holds in its first group: the header map and the copy net/http takes of
// it grew to tables (0.6 KB more per open stream in make bench-streams,
// measured when the values were still set one by one).
//
// The status goes through resp, echo's response (which the access log
// reads); the events go to the net/http writer under it, which lives as
// long as the request, where resp is reused by the router once its
// handler has returned and the stream goes on as the request's tail
// (streamHub.run).
func (l *eventLog) attachLocked(resp *echo.Response) *sink {
	sk := &sink{conn: l.hub.startStream(resp), done: make(chan struct{})}
	l.sink = sk
	return sk
}

// startStream sends a stream's headers and its retry hint, which go out
// with the first flush, and returns the connection.
func (h *streamHub) startStream(resp *echo.Response) streamConn {
	hd := resp.Header()
	hd["Content-Type"] = headerEventStream // shared values, as securityHeaders'
	hd["Cache-Control"] = headerNoCache
	hd["X-Accel-Buffering"] = headerNo // nginx: do not buffer the stream
	resp.WriteHeader(http.StatusOK)
	w := resp.Writer
	_, _ = w.Write(h.retryLine)
	return newStreamConn(w, h.opts.WriteTimeout)
}

// resumeLocked attaches w in place of the current connection (the latest
// wins) and replays the buffered events after seq.
func (l *eventLog) resumeLocked(resp *echo.Response, seq int) *sink {
	if l.sink != nil {
		close(l.sink.done)
		l.sink = nil
	}
	if l.grace != nil {
		l.grace.Stop()
		l.grace = nil
	}
	sk := l.attachLocked(resp)
	if len(l.kept) > 0 && l.first > seq+1 {
		// The events in between were dropped from the bounded buffer: say
		// so rather than hand over an answer with a hole in it.
		if err := l.writeLocked(gapEvent(l.id, seq+1, l.first)); err == nil {
			l.sink = nil
			close(sk.done)
		}
		return sk
	}
	// Flush the headers and retry hint even when nothing is to be replayed.
	if err := l.writeLocked(nil); err != nil {
		return sk
	}
	defer l.trimScratch()
	c := l.keptCursor()
	for i, e := range l.kept {
		if l.first+i <= seq {
			c.pass(e)
			continue
		}
		l.resetScratch()
		if err := l.frameKeptLocked(l.first+i, e, &c); err != nil {
			return sk // cannot happen: the same values were framed when sent
		}
		if err := l.writeLocked(l.scratch.Bytes()); err != nil {
			return sk
		}
	}
	return sk
}

// frameKeptLocked frames kept event seq, e at c, into l.scratch again,
// byte for byte as it was sent, and moves c past it.
func (l *eventLog) frameKeptLocked(seq int, e keptEvent, c *keptCursor) error {
	at := *c
	c.pass(e)
	switch e.kind {
	case keptToken:
		l.frameText(seq, EventToken, l.keptText(at.text, e))
	case keptReasoning:
		l.frameText(seq, EventReasoning, l.keptText(at.text, e))
	case keptSources:
		return l.frameJSON(seq, EventSources, sourcesEvent{Sources: l.sources})
	case keptMeta:
		return l.frameJSON(seq, EventMeta, *l.meta)
	case keptStage:
		b, ok := l.stages[at.stage].AppendJSON(l.appendHead(l.frameBuffer(stageFrameBytes), seq, EventStage))
		if !ok {
			return fmt.Errorf("framing kept stage event %d again", seq)
		}
		l.scratch.Write(append(b, "\n\n"...))
	case keptDone:
		b, ok := pipeline.AppendDoneJSON(l.appendHead(l.frameBuffer(int(e.size)), seq, EventDone), l.done)
		if !ok {
			return fmt.Errorf("framing the kept done event %d again", seq)
		}
		l.scratch.Write(append(b, "\n\n"...))
	default:
		l.scratch.WriteString(l.framed[at.framed])
	}
	return nil
}

// keptText is kept token or reasoning event e's text, which starts at at
// of all the stream's texts.
func (l *eventLog) keptText(at int, e keptEvent) string {
	i := at - l.textsGone
	return string(l.texts[i : i+int(e.n)])
}

// keepText keeps a token's or reasoning's text in l.texts and returns its
// kept event, of kind.
func (l *eventLog) keepText(kind keptKind, text string) keptEvent {
	if l.texts == nil {
		l.texts = make([]byte, 0, 4*max(l.expect, 16)) // four bytes a token, most answers' mean
	}
	e := keptEvent{kind: kind, n: uint16(len(text))}
	l.texts = append(l.texts, text...)
	return e
}

// keepFramed keeps the event framed in l.scratch as it is and returns its
// kept event.
func (l *eventLog) keepFramed() keptEvent {
	l.framed = append(l.framed, l.scratch.String())
	return keptEvent{kind: keptFramed}
}

// dropKeptLocked forgets the oldest kept event.
func (l *eventLog) dropKeptLocked() {
	e := l.kept[0]
	l.keptBytes -= int(e.size)
	switch e.kind {
	case keptSources:
		l.sources = nil
	case keptStage:
		l.stages[0] = pipeline.StageSpan{}
		l.stages = l.stages[1:]
	case keptDone:
		l.done = nil
	case keptMeta:
		l.meta = nil
	case keptFramed:
		l.framed[0] = ""
		l.framed = l.framed[1:]
	case keptToken, keptReasoning:
		// The texts before the next one are let go once they are half of
		// the buffer.
		l.textsFront += int(e.n)
		if cut := l.textsFront - l.textsGone; 2*cut >= len(l.texts) {
			l.texts = append(make([]byte, 0, max(cap(l.texts)-cut, len(l.texts)-cut)), l.texts[cut:]...)
			l.textsGone += cut
		}
	}
	l.kept[0] = keptEvent{}
	l.kept = l.kept[1:]
	l.first++
}

// trimScratch hands l.scratch's buffer back between events: one grown
// past maxScratch (by a large event) to largeScratch, for the next
// stream's, a small one to smallScratch.
func (l *eventLog) trimScratch() {
	n := l.scratch.Cap()
	if n == 0 {
		return
	}
	l.scratch.Reset()
	p := l.box
	if p == nil {
		p = new([]byte)
	}
	*p = l.scratch.AvailableBuffer()
	if n > maxScratch {
		largeScratch.Put(p)
	} else {
		smallScratch.Put(p)
	}
	l.scratch, l.box = bytes.Buffer{}, nil
}

// resetScratch readies l.scratch, empty, for an event: with a buffer from
// smallScratch when it has none.
func (l *eventLog) resetScratch() {
	if l.scratch.Cap() == 0 {
		if p, _ := smallScratch.Get().(*[]byte); p != nil {
			l.scratch, l.box = *bytes.NewBuffer((*p)[:0]), p
		}
	}
	l.scratch.Reset()
}

// frameBuffer readies l.scratch (reset) for an event of about n bytes
// besides its id, and returns it to be appended to: grown once here when
// it is too small, instead of by each append into it.
func (l *eventLog) frameBuffer(n int) []byte {
	l.resetScratch()
	l.scratch.Grow(len(l.id) + n)
	return l.scratch.AvailableBuffer()
}

// smallScratch holds the scratch buffers of events (up to maxScratch)
// between them, and largeScratch those of large events (the sources and
// done events, several KB) between streams: each stream frames one of
// each, and growing a buffer to their size took several copies per ask.
var smallScratch, largeScratch sync.Pool

// largeScratchLocked readies l.scratch for a large event.
func (l *eventLog) largeScratchLocked() {
	if l.scratch.Cap() > maxScratch {
		return
	}
	if p, _ := largeScratch.Get().(*[]byte); p != nil {
		l.trimScratch()
		l.scratch, l.box = *bytes.NewBuffer((*p)[:0]), p
	}
}

// writeLocked writes p to the sink and flushes it (with any event held
// before it) within the write timeout. On failure the sink is detached: a
// timed-out write (the client stopped reading) cancels the query as
// client_stalled; a broken connection leaves it running for a resume.
func (l *eventLog) writeLocked(p []byte) error { return l.writeOrHoldLocked(p, true) }

// writeOrHoldLocked is writeLocked, or with flush false only the write:
// the event is held in the connection's buffer until the next flush, which
// then sends it with the events after it in one write.
func (l *eventLog) writeOrHoldLocked(p []byte, flush bool) error {
	sk := l.sink
	err := sk.conn.write(p, flush)
	if err == nil {
		return nil
	}
	sk.err = err
	l.sink = nil
	close(sk.done)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.goneLocked(pipeline.ErrClientStalled)
		return l.gone
	}
	l.detachedLocked()
	return nil
}

// detach is called when sk's client went away (its request context ended).
func (l *eventLog) detach(sk *sink) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sink != sk || l.ended {
		return
	}
	l.sink = nil
	close(sk.done)
	l.detachedLocked()
}

// detachedLocked starts the wait for a resume, here or, through the
// shared log, on another replica.
func (l *eventLog) detachedLocked() {
	if l.grace != nil || l.gone != nil {
		return
	}
	l.publishKeptLocked()
	l.grace = time.AfterFunc(2*l.hub.opts.Retry, l.graceOver)
}

// publishKeptLocked starts the query's shared log (StreamOptions.Shared),
// once its client has left: the events kept so far, then every event as it
// is sent. Only a client that left can reconnect elsewhere, so a query
// whose client stays costs the shared log nothing (a round trip per batch
// of events was most of what --redis-url added to an ask).
func (l *eventLog) publishKeptLocked() {
	sh := l.hub.opts.Shared
	if sh == nil || l.publish != nil || l.id == "" || l.ended {
		return
	}
	l.publish, l.unpublish = sh.Publish(l.id, l.keyID)
	defer l.trimScratch()
	c := l.keptCursor()
	for i, e := range l.kept {
		l.resetScratch()
		if err := l.frameKeptLocked(l.first+i, e, &c); err != nil {
			return // cannot happen: the same values were framed when sent
		}
		l.publish(l.first+i, l.scratch.Bytes())
	}
}

// graceOver cancels a query whose client did not come back within the
// grace, unless it came back on another replica (the shared log's
// follower marks it attached): then the grace starts again, so that the
// query runs for as long as someone follows it, and is cancelled when
// they leave.
func (l *eventLog) graceOver() {
	if sh := l.hub.opts.Shared; sh != nil {
		l.mu.Lock()
		id := l.id
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		attached, _ := sh.Attached(ctx, id)
		cancel()
		if attached {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.sink == nil && !l.ended && l.gone == nil {
				l.grace = nil
				l.detachedLocked()
			}
			return
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sink == nil && !l.ended {
		l.goneLocked(pipeline.ErrClientGone)
	}
}

// goneLocked cancels the query for cause; later events return the error.
func (l *eventLog) goneLocked(cause *pipeline.Cancel) {
	if l.gone != nil {
		return
	}
	l.gone = fmt.Errorf("stream of query %s: %w", l.id, cause)
	l.cancel(cause)
	if l.grace != nil {
		l.grace.Stop()
		l.grace = nil
	}
}

// send encodes one event with encoding/json, keeps it for resumes and
// writes it to the client, if one is attached: flushed with it for the
// events that end a stream (done, error), held until the next flush for
// the others (meta, stage, sources; see Flush).
func (l *eventLog) send(name string, v any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.encodeLocked(name, v)
}

func (l *eventLog) encodeLocked(name string, v any) error {
	if l.gone != nil {
		return l.gone
	}
	l.resetScratch()
	if err := l.frameJSON(l.seq, name, v); err != nil {
		return err
	}
	return l.keepAndWriteLocked(name, l.keepFramed(), name == EventDone || name == EventError)
}

// frameJSON frames event seq with v's JSON (encoding/json's, HTML escaping
// off) as its data into l.scratch.
func (l *eventLog) frameJSON(seq int, name string, v any) error {
	l.scratch.Write(l.appendHead(l.scratch.AvailableBuffer(), seq, name))
	enc := json.NewEncoder(&l.scratch)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends with '\n'
		return fmt.Errorf("encoding %s event: %w", name, err)
	}
	l.scratch.WriteByte('\n')
	return nil
}

// Flush sends the events held since the last flush. The pipeline calls it
// before it waits on anything outside the process (an embedder, a search,
// a reranker, the model) and after the first token's stages, so that the
// events of a burst (meta and the first stages; the retrieval stages and
// the sources) reach the client in one write instead of one each.
func (l *eventLog) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone != nil {
		return l.gone
	}
	if l.sink == nil || !l.sink.conn.pending {
		return nil
	}
	if err := l.writeLocked(nil); err != nil {
		return fmt.Errorf("flushing events: %w", err)
	}
	return nil
}

// sendText sends a token or reasoning event, {"text":…}: the one sent per
// token, framed here without boxing the delta in an interface (an
// allocation per token), flushed with the events held before it or held.
func (l *eventLog) sendText(name, text string, flush bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone != nil {
		return l.gone
	}
	l.resetScratch()
	l.frameText(l.seq, name, text)
	if len(text) > maxKeptText {
		return l.keepAndWriteLocked(name, l.keepFramed(), flush)
	}
	kind := keptToken
	if name == EventReasoning {
		kind = keptReasoning
	}
	return l.keepAndWriteLocked(name, l.keepText(kind, text), flush)
}

// frameText frames event seq, {"text":…}, into l.scratch.
func (l *eventLog) frameText(seq int, name, text string) {
	b := append(l.appendHead(l.frameBuffer(len(text)+48), seq, name), `{"text":`...)
	b = jsonappend.AppendString(b, text)
	l.scratch.Write(append(b, "}\n\n"...))
}

// appendHead appends event seq's id and name lines and the data field's
// name: all of an event before its JSON.
func (l *eventLog) appendHead(b []byte, seq int, name string) []byte {
	b = append(b, "id: "...)
	b = append(b, l.id...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, "\nevent: "...)
	b = append(b, name...)
	return append(b, "\ndata: "...)
}

// keepAndWriteLocked keeps e, the event framed in l.scratch, for resumes
// and writes it to the client, if one is attached, flushing it or holding
// it.
func (l *eventLog) keepAndWriteLocked(name string, e keptEvent, flush bool) error {
	defer l.trimScratch()
	e.size = int32(l.scratch.Len())
	if len(l.kept) == 0 {
		l.first = l.seq
		if l.kept == nil && l.expect > 0 {
			l.kept = make([]keptEvent, 0, l.expect)
		}
	}
	if l.publish != nil {
		l.publish(l.seq, l.scratch.Bytes())
	}
	l.seq++
	l.kept = append(l.kept, e)
	l.keptBytes += int(e.size)
	for l.keptBytes > l.hub.opts.BufferBytes && len(l.kept) > 1 {
		l.dropKeptLocked()
	}
	if l.sink == nil {
		return nil
	}
	if err := l.writeOrHoldLocked(l.scratch.Bytes(), flush); err != nil {
		return fmt.Errorf("writing %s event: %w", name, err)
	}
	return nil
}

// heartbeat sends a keep-alive comment whenever the stream has been silent
// for every, until the stream ends (startHeartbeat).
func (l *eventLog) heartbeat(every time.Duration) {
	l.beat = startHeartbeat(&l.mu, every, func() time.Duration {
		if l.ended {
			return 0
		}
		if l.sink == nil || l.gone != nil {
			return every
		}
		if wait := beatAfter(every, l.sink.conn.lastWrite); wait > 0 {
			return wait
		}
		_ = l.writeLocked(keepAlive)
		return every
	})
}

// end closes the stream after the query finished.
func (l *eventLog) end() {
	l.mu.Lock()
	if l.sink != nil && l.sink.conn.pending && l.gone == nil {
		_ = l.writeLocked(nil) // a query ends with done or error, flushed; this is the safety net
	}
	// A client cut off while the answer finished has not seen its end:
	// its resume, due within the grace, still gets the rest.
	awaited := l.sink == nil && l.grace != nil && l.gone == nil
	l.ended = true
	if l.unpublish != nil {
		l.unpublish()
	}
	if sk := l.sink; sk != nil {
		l.sink = nil
		close(sk.done)
		sk.release()
	}
	if l.grace != nil {
		l.grace.Stop()
		l.grace = nil
	}
	if l.beat != nil {
		l.beat.Stop()
	}
	l.mu.Unlock()
	if awaited {
		l.hub.linger(l)
		return
	}
	l.hub.remove(l)
}

func (l *eventLog) Meta(m pipeline.Meta) error {
	l.mu.Lock()
	l.id = m.QueryID
	if l.sink == nil { // the client left before the query had an id
		l.publishKeptLocked()
	}
	l.mu.Unlock()
	l.hub.mu.Lock()
	l.hub.byID[m.QueryID] = l
	l.hub.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone != nil {
		return l.gone
	}
	l.resetScratch()
	if err := l.frameJSON(l.seq, EventMeta, m); err != nil {
		return err
	}
	if l.meta != nil { // a second meta event: kept framed
		return l.keepAndWriteLocked(EventMeta, l.keepFramed(), false)
	}
	l.meta = &m
	return l.keepAndWriteLocked(EventMeta, keptEvent{kind: keptMeta}, false)
}

// Stage sends a stage event (nine per ask), framed by hand
// (pipeline.StageSpan.AppendJSON: what encoding/json writes, without its
// reflection or the span's boxing in an interface), or through
// encoding/json for a span AppendJSON does not frame.
func (l *eventLog) Stage(sp pipeline.StageSpan) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone != nil {
		return l.gone
	}
	b, ok := sp.AppendJSON(l.appendHead(l.frameBuffer(stageFrameBytes), l.seq, EventStage))
	if !ok {
		return l.encodeLocked(EventStage, sp)
	}
	l.scratch.Write(append(b, "\n\n"...))
	if l.stages == nil {
		l.stages = make([]pipeline.StageSpan, 0, 10) // an ask's nine, and reasoning's
	}
	l.stages = append(l.stages, sp)
	return l.keepAndWriteLocked(EventStage, keptEvent{kind: keptStage}, false)
}

// Sources sends the sources event and keeps the sources themselves for a
// resume, not their framing: their texts are the store's strings, or would
// take as much room framed.
func (l *eventLog) Sources(src []pipeline.Source) error {
	if src == nil {
		src = []pipeline.Source{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone != nil {
		return l.gone
	}
	l.largeScratchLocked()
	l.resetScratch()
	if err := l.frameJSON(l.seq, EventSources, sourcesEvent{Sources: src}); err != nil {
		return err
	}
	if l.sources != nil { // a second sources event: kept framed
		return l.keepAndWriteLocked(EventSources, l.keepFramed(), false)
	}
	l.sources = cloneSources(src)
	return l.keepAndWriteLocked(EventSources, keptEvent{kind: keptSources}, false)
}

// cloneSources copies src deeply enough that a replay frames what was
// sent even if the caller changes src afterwards.
func cloneSources(src []pipeline.Source) []pipeline.Source {
	out := slices.Clone(src)
	for i, s := range out {
		if s.RerankScore != nil {
			v := *s.RerankScore
			out[i].RerankScore = &v
		}
	}
	return out
}

// Delta sends a token or reasoning event; one whose More is set is held
// until the next flush (see pipeline.Delta.More), so the tokens of one
// upstream read reach the client in one write.
func (l *eventLog) Delta(d pipeline.Delta) error {
	if d.Reasoning {
		return l.sendText(EventReasoning, d.Text, !d.More)
	}
	return l.sendText(EventToken, d.Text, !d.More)
}

// Done sends the done event, framed by hand (pipeline.AppendDoneJSON)
// or, for one it does not frame, through encoding/json.
func (l *eventLog) Done(rec ragtime.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone != nil {
		return l.gone
	}
	done := rec.DoneEvent()
	l.largeScratchLocked()
	l.resetScratch()
	b, ok := pipeline.AppendDoneJSON(l.appendHead(l.scratch.AvailableBuffer(), l.seq, EventDone), &done)
	if !ok {
		return l.encodeLocked(EventDone, done)
	}
	l.scratch.Write(append(b, "\n\n"...))
	l.done = &done
	return l.keepAndWriteLocked(EventDone, keptEvent{kind: keptDone}, true)
}

// Fail sends the error event: the failure as the caller is told it
// (callerFailure).
func (l *eventLog) Fail(e *ragtime.Error) error {
	return l.send(EventError, callerFailure(l.hub.opts.log, l.id, e))
}
