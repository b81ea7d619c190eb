package api

// The events an /ask stream keeps for resumes, and their framing again.

import (
	"fmt"
	"math"

	"ragtime/pipeline"
)

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
