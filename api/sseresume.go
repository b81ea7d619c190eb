package api

// Resuming an /ask stream (Last-Event-ID): the wait for a client that
// left, the shared log for a resume on another replica, and the replay of
// the kept events.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/auth"
	"ragtime/pipeline"
)

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
