package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"ragtime"
	"ragtime/internal/jsonappend"
	"ragtime/pipeline"
)

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

// keepAlive is the heartbeat: an SSE comment, which clients ignore.
var keepAlive = []byte(": keep-alive\n\n")

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
