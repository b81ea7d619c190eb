package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/auth"
	"ragtime/internal/openaiwire"
	"ragtime/pipeline"
)

// A resumable chat stream ("ragtime": {"resumable": true} with stream
// true) is an OpenAI chat completion stream whose chunks carry SSE ids
// (id: <query id>:<sequence>) and survive the client: as an /ask stream,
// the query runs on when its connection drops, its chunks are kept (and,
// with a shared log, published once the client has left), and a POST
// /v1/chat/completions with Last-Event-ID, on this replica or any other
// sharing the log, gets the chunks after that id and the rest as they
// come. Stock OpenAI clients send no Last-Event-ID and do not opt in: their
// streams are unchanged, and cancelled when they leave.

// chatResume is a resumable chat stream's state, guarded by its
// chatStream's mu.
type chatResume struct {
	hub    *streamHub
	stream *chatStream
	cancel context.CancelCauseFunc
	keyID  string // the API key that asked ("" without one)
	qid    string // set by the meta event
	seq    int    // the next chunk's sequence
	// kept holds the latest chunks as framed, oldest first (kept[0] is
	// sequence first), within StreamOptions.BufferBytes.
	kept      [][]byte
	first     int
	keptBytes int
	origin    *sink // the asking request's connection
	sink      *sink // nil while no client is attached
	grace     *time.Timer
	gone      error
	ended     bool
	// publish and unpublish send each chunk to, and end, the query's
	// shared log, from the client's first leaving on.
	publish   func(seq int, frame []byte)
	unpublish func()
}

// runResumableChat answers one admitted chat ask on out as a resumable
// stream: the query's context is not the request's, so a client that
// leaves may come back within twice the retry delay (here, or elsewhere
// through the shared log) before the query is cancelled as client_gone.
func (h *streamHub) runResumableChat(c echo.Context, asker Asker, req *pipeline.Request, out *chatStream) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(c.Request().Context()))
	defer cancel(nil)
	r := &chatResume{hub: h, stream: out, cancel: cancel, keyID: req.KeyID}
	r.origin = &sink{conn: newStreamConn(c.Response(), h.opts.WriteTimeout), done: make(chan struct{})}
	r.sink = r.origin
	out.res = r
	h.mu.Lock()
	h.open[out] = cancel
	h.mu.Unlock()
	stop := context.AfterFunc(c.Request().Context(), func() { out.detach(r.origin) })
	defer stop()
	asker.Run(ctx, req, out)
	out.finish()
	if r.origin.err == nil {
		r.origin.conn.release()
	}
	h.mu.Lock()
	h.closeLocked(out)
	h.mu.Unlock()
	// Kept for a client that comes back after the end, as /ask's linger.
	time.AfterFunc(2*h.opts.Retry, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if r.qid != "" && h.chats[r.qid] == out {
			delete(h.chats, r.qid)
		}
	})
}

// startResumable starts the stream on the asking connection, if it is
// still there (headers and the retry hint), and makes the query resumable
// by its id.
func (s *chatStream) startResumable(qid string) {
	r := s.res
	s.mu.Lock()
	r.qid = qid
	if r.sink != nil {
		s.conn = r.hub.startStream(s.c.Response())
		r.sink.conn = s.conn
	}
	s.started = true
	s.enc = openaiwire.NewChunkEncoder(s.id, s.model, s.created, false)
	s.mu.Unlock()
	r.hub.mu.Lock()
	r.hub.chats[qid] = s
	r.hub.mu.Unlock()
}

// emitLocked frames chunk b (a data line and its blank line) with the
// next id, keeps it, publishes it when the shared log is on, and writes it
// to the attached client, if any: flushed, or held until the next flush.
func (r *chatResume) emitLocked(b []byte, flush bool) error {
	if r.gone != nil {
		return r.gone
	}
	frame := make([]byte, 0, len(r.qid)+16+len(b))
	frame = append(frame, "id: "...)
	frame = append(frame, r.qid...)
	frame = append(frame, ':')
	frame = strconv.AppendInt(frame, int64(r.seq), 10)
	frame = append(frame, '\n')
	frame = append(frame, b...)
	r.kept = append(r.kept, frame)
	r.keptBytes += len(frame)
	for len(r.kept) > 1 && r.keptBytes > r.hub.opts.BufferBytes {
		r.keptBytes -= len(r.kept[0])
		r.kept[0] = nil
		r.kept = r.kept[1:]
		r.first++
	}
	if r.publish != nil {
		r.publish(r.seq, frame)
	}
	r.seq++
	return r.writeLocked(frame, flush)
}

// writeLocked writes p to the attached client, if any. A client that took
// nothing within the write timeout cancels the query (client_stalled); a
// broken connection leaves it running for a resume.
func (r *chatResume) writeLocked(p []byte, flush bool) error {
	sk := r.sink
	if sk == nil {
		return nil
	}
	err := sk.conn.write(p, flush)
	if err == nil {
		return nil
	}
	sk.err = err
	r.sink = nil
	close(sk.done)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		r.goneLocked(pipeline.ErrClientStalled)
		return r.gone
	}
	r.detachedLocked()
	return nil
}

// detach is called when sk's client went away (its request ended).
func (s *chatStream) detach(sk *sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res
	if r.sink != sk || r.ended {
		return
	}
	r.sink = nil
	close(sk.done)
	r.detachedLocked()
}

// detachedLocked starts the wait for a resume and, with a shared log,
// publishes the chunks so far and every one after them.
func (r *chatResume) detachedLocked() {
	if r.grace != nil || r.gone != nil {
		return
	}
	if sh := r.hub.opts.Shared; sh != nil && r.publish == nil && r.qid != "" && !r.ended {
		r.publish, r.unpublish = sh.Publish(r.qid, r.keyID)
		for i, f := range r.kept {
			r.publish(r.first+i, f)
		}
	}
	r.grace = time.AfterFunc(2*r.hub.opts.Retry, r.graceOver)
}

// graceOver cancels a query whose client did not come back within the
// grace, unless a client follows it on another replica.
func (r *chatResume) graceOver() {
	s := r.stream
	if sh := r.hub.opts.Shared; sh != nil {
		s.mu.Lock()
		qid := r.qid
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		attached, _ := sh.Attached(ctx, qid)
		cancel()
		if attached {
			s.mu.Lock()
			defer s.mu.Unlock()
			if r.sink == nil && !r.ended && r.gone == nil {
				r.grace = nil
				r.detachedLocked()
			}
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.sink == nil && !r.ended {
		r.goneLocked(pipeline.ErrClientGone)
	}
}

func (r *chatResume) goneLocked(cause *pipeline.Cancel) {
	if r.gone != nil {
		return
	}
	r.gone = fmt.Errorf("chat stream of query %s: %w", r.qid, cause)
	r.cancel(cause)
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
}

// endLocked ends a resumable stream: its attached client gets what is held
// flushed, the shared log its end.
func (r *chatResume) endLocked() {
	r.ended = true
	if sk := r.sink; sk != nil {
		if sk.conn.pending {
			if err := sk.conn.write(nil, true); err != nil {
				sk.err = err
			}
		}
		r.sink = nil
		close(sk.done)
	}
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
	if r.unpublish != nil {
		r.unpublish()
	}
}

// resumeChat serves POST /v1/chat/completions with Last-Event-ID: the
// chunks after it of a resumable chat stream, here or (with a shared log)
// on another replica, then the rest as they come. A query not running, not
// resumable, or not asked by this key is answered 204 No Content.
func (h *streamHub) resumeChat(c echo.Context, lastEventID string) error {
	qid, seq, ok := parseEventID(lastEventID)
	if !ok {
		return badRequest("Last-Event-ID", "last_event_id_invalid",
			fmt.Sprintf("Last-Event-ID %.80q is not an id this server sent (query_id:sequence)", lastEventID))
	}
	h.mu.Lock()
	s := h.chats[qid]
	h.mu.Unlock()
	caller, _ := auth.CallerFrom(c.Request().Context())
	if s == nil && h.opts.Shared != nil {
		c.Response().Header().Set(HeaderQueryID, qid)
		return h.resumeSharedAs(c, qid, seq, caller.KeyID(), chatErrorFrame)
	}
	if s == nil || s.res.keyID != caller.KeyID() {
		return c.NoContent(http.StatusNoContent)
	}
	s.mu.Lock()
	r := s.res
	if r.gone != nil || (r.ended && seq >= r.seq-1) {
		s.mu.Unlock()
		return c.NoContent(http.StatusNoContent)
	}
	if r.sink != nil { // the latest connection wins
		close(r.sink.done)
		r.sink = nil
	}
	if r.grace != nil {
		r.grace.Stop()
		r.grace = nil
	}
	c.Response().Header().Set(HeaderQueryID, qid)
	sk := &sink{conn: h.startStream(c.Response()), done: make(chan struct{})}
	r.sink = sk
	if len(r.kept) > 0 && r.first > seq+1 {
		_ = r.writeLocked(chatErrorFrame(qid, r.first-1, "resume_gap",
			fmt.Sprintf("chunks %d to %d of this query are no longer held; ask again", seq+1, r.first-1)), true)
		if r.sink == sk {
			r.sink = nil
			close(sk.done)
			r.detachedLocked()
		}
	} else {
		for i, f := range r.kept {
			if r.first+i > seq {
				_ = r.writeLocked(f, false)
			}
		}
		_ = r.writeLocked(nil, true)
		if r.ended && r.sink == sk {
			r.sink = nil
			close(sk.done)
		}
	}
	s.mu.Unlock()
	stop := context.AfterFunc(c.Request().Context(), func() { s.detach(sk) })
	defer stop()
	<-sk.done
	sk.release()
	return nil
}

// chatErrorFrame is a chat stream's error chunk, with the id seq: OpenAI's
// error object and the query id beside it.
func chatErrorFrame(qid string, seq int, code, msg string) []byte {
	var f chatFailure
	f.Error = asOpenAIError(&apiError{Status: http.StatusBadGateway, Code: code, Message: msg})
	f.Ragtime.QueryID = qid
	data, _ := json.Marshal(f)
	return fmt.Appendf(nil, "id: %s:%d\ndata: %s\n\n", qid, seq, data)
}

// askErrorFrame is an /ask stream's error event, with the id seq.
func askErrorFrame(qid string, seq int, code, msg string) []byte {
	data, _ := json.Marshal(ragtime.Error{Code: code, Message: msg})
	return fmt.Appendf(nil, "id: %s:%d\nevent: %s\ndata: %s\n\n", qid, seq, EventError, data)
}
