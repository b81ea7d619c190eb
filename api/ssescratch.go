package api

// The scratch buffers an /ask stream frames its events in, pooled
// between events and streams to save allocations (make bench-streams).

import (
	"bytes"
	"sync"
)

// maxScratch is the largest scratch buffer an eventLog keeps between
// events: a token's or a stage's fits.
const maxScratch = 1 << 10

// stageFrameBytes is room for a stage event with a few attrs, besides its
// id: most fit, a larger one grows the scratch as it is framed.
const stageFrameBytes = 256

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
