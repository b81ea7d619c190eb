package sim

import (
	"container/heap"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// seq is one request as the engine sees it. The engine's goroutine owns
// every field except those marked atomic; the request's writer reads the
// timing fields only after loading produced, which the engine stores last.
type seq struct {
	arrival      time.Time
	promptTokens int
	// blocks are the chain hashes of the prompt's full 16-token blocks.
	blocks []uint64
	// reasoning and answer are the output lengths in tokens.
	reasoning, answer int

	// set by the engine
	replica      int
	cachedTokens int
	uncached     int // prompt tokens to prefill
	// scale multiplies the sequence's prefill cost (Config.PrefillShiftAfter);
	// 0 is 1.
	scale       float64
	prefilled   int // of uncached
	prefillDone bool
	admitted    time.Time
	firstToken  time.Time
	lastToken   time.Time
	emitted     int

	// produced is the number of output tokens released to the writer.
	produced atomic.Int64
	// releasedAt holds the modelled times (Unix nanoseconds) of the last
	// releaseRing tokens, token i at i % releaseRing, stored before
	// produced; the writer reads them to measure its own lag.
	releasedAt [releaseRing]atomic.Int64
	// done is set once the engine has released every token (or dropped the
	// sequence); the writer reads the timing fields after seeing it.
	done atomic.Bool
	// cancelled is set by the writer when its client is gone; the engine
	// frees the sequence's slot at its next step.
	cancelled atomic.Bool
	// wake is signalled (without blocking) whenever produced or done changes.
	wake chan struct{}
}

// releaseRing is how many release times a sequence keeps: a writer further
// behind than this measures its lag from the oldest time kept, a lower
// bound.
const releaseRing = 16

// releaseTime returns the modelled time token i was released at, or that of
// the oldest token kept when i has left the ring; n is produced as loaded.
func (s *seq) releaseTime(i, n int) time.Time {
	i = max(i, n-releaseRing)
	return time.Unix(0, s.releasedAt[i%releaseRing].Load())
}

// prefillScale is what the sequence's prefill cost is multiplied by.
func (s *seq) prefillScale() float64 {
	if s.scale == 0 {
		return 1
	}
	return s.scale
}

func newSeq(arrival time.Time, promptTokens int, blocks []uint64, reasoning, answer int) *seq {
	return &seq{arrival: arrival, promptTokens: promptTokens, blocks: blocks, reasoning: reasoning, answer: answer, wake: make(chan struct{}, 1)}
}

func (s *seq) total() int { return s.reasoning + s.answer }

func (s *seq) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// emit releases one token that left the model at the modelled time at.
func (s *seq) emit(at time.Time) {
	if s.emitted == 0 {
		s.firstToken = at
	}
	s.lastToken = at
	s.releasedAt[s.emitted%releaseRing].Store(at.UnixNano())
	s.emitted++
	if s.emitted >= s.total() {
		s.done.Store(true)
	}
	s.produced.Store(int64(s.emitted))
	s.signal()
}

// costs is the cost model in durations.
type costs struct {
	overhead  float64 // ms per prefill
	perToken  float64 // ms per uncached prompt token
	quadratic float64 // ms per uncached prompt token squared
	itl       float64 // ms per decode step at batch 1
	perSeq    float64 // ms added to a decode step per decoding sequence beyond the first
	jitter    float64 // fraction of the step, uniform ±
	chunk     int     // chunked-prefill tokens per sequence per step, 0 = whole prefill in one step
}

// prefillMs is the cost of prefilling tokens p..p+n of a prompt (overhead
// charged on the first chunk); summed over chunks it telescopes to
// overhead + perToken×u + quadratic×u².
func (c *costs) prefillMs(p, n int) float64 {
	v := c.perToken*float64(n) + c.quadratic*(float64(p+n)*float64(p+n)-float64(p)*float64(p))
	if p == 0 {
		v += c.overhead
	}
	return v
}

// itlMs is the duration of one decode step over batch decoding sequences,
// with bounded jitter: itl at batch 1, plus perSeq for every further
// sequence (the step's matrix products grow with the batch once the weights'
// read no longer dominates; see docs/llmsim.md).
func (c *costs) itlMs(r *rand.Rand, batch int) float64 {
	v := c.itl + c.perSeq*float64(max(batch-1, 0))
	if c.jitter == 0 || r == nil {
		return v
	}
	return v * (1 + c.jitter*(2*r.Float64()-1))
}

// engine is one simulated inference server: a scheduler over sequences and
// its own prefix cache. Its methods run on one goroutine (the driver's);
// they are a pure state machine over modelled time, which lets tests run
// them on a virtual clock.
type engine interface {
	// add hands the engine a new sequence; it arrived at s.arrival.
	add(s *seq)
	// advance releases every token due at or before now and returns when the
	// engine next has something due (zero when idle).
	advance(now time.Time) time.Time
	// load reports the sequences running and waiting.
	load() (running, waiting int)
}

// admitPrefill applies the prefix cache to s as its prefill is scheduled.
func admitPrefill(s *seq, cache *prefixCache, at time.Time) {
	s.admitted = at
	if cache != nil {
		s.cachedTokens = cache.lookup(s.blocks) * blockTokens
		if s.cachedTokens >= s.promptTokens && s.promptTokens > 0 {
			// the last prompt token is always recomputed to produce logits
			s.cachedTokens = s.promptTokens - 1
		}
	}
	s.uncached = s.promptTokens - s.cachedTokens
}

// ---- unlimited: every request on its own timeline ----

// idealEngine models a server with unlimited capacity: each request's first
// token leaves exactly prefill after its arrival and the rest itl apart,
// whatever else is running. It is the default (max-num-seqs 0).
type idealEngine struct {
	c     costs
	cache *prefixCache
	rng   *rand.Rand
	h     eventHeap
}

type event struct {
	at time.Time
	s  *seq
}

type eventHeap []event

func (h eventHeap) Len() int           { return len(h) }
func (h eventHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h eventHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)        { *h = append(*h, x.(event)) }

// removeRoot removes the earliest event, without Pop's allocation.
func (h *eventHeap) removeRoot() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	old[n] = event{}
	*h = old[:n]
	if n > 0 {
		heap.Fix(h, 0)
	}
}

func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*h = old[:len(old)-1]
	return e
}

func newIdealEngine(c costs, cache *prefixCache, seed uint64) *idealEngine {
	return &idealEngine{c: c, cache: cache, rng: rand.New(rand.NewPCG(seed, 0x11))}
}

func (e *idealEngine) add(s *seq) {
	admitPrefill(s, e.cache, s.arrival)
	first := s.arrival.Add(ms(e.c.prefillMs(0, s.uncached) * s.prefillScale()))
	if e.cache != nil {
		e.cache.insert(s.blocks)
	}
	if s.total() == 0 {
		s.firstToken, s.lastToken = first, first
		heap.Push(&e.h, event{at: first, s: s})
		return
	}
	heap.Push(&e.h, event{at: first, s: s})
}

// advance moves each due sequence's event in place (heap.Fix at the root)
// rather than popping and pushing it: Pop and Push pass events through an
// interface, an allocation each, per token.
func (e *idealEngine) advance(now time.Time) time.Time {
	for len(e.h) > 0 {
		ev := e.h[0]
		if ev.at.After(now) {
			return ev.at
		}
		s := ev.s
		switch {
		case s.cancelled.Load():
			s.done.Store(true)
			e.h.removeRoot()
		case s.total() == 0:
			s.done.Store(true)
			s.signal()
			e.h.removeRoot()
		default:
			s.emit(ev.at)
			if s.emitted < s.total() {
				e.h[0].at = ev.at.Add(ms(e.c.itlMs(e.rng, 1)))
				heap.Fix(&e.h, 0)
			} else {
				e.h.removeRoot()
			}
		}
	}
	return time.Time{}
}

func (e *idealEngine) load() (int, int) { return e.h.Len(), 0 }

// ---- continuous batching over a fixed number of slots ----

// batchEngine is a step scheduler with continuous batching: at most maxSeqs
// sequences run; the rest wait in FIFO order. Each step either prefills (and
// then nothing else happens: every running sequence's next token waits
// behind it, head-of-line blocking) or, with chunked prefill, advances each
// prefilling sequence by at most chunk tokens alongside one decode token for
// every decoding sequence.
type batchEngine struct {
	c       costs
	cache   *prefixCache
	maxSeqs int
	rng     *rand.Rand

	waiting []*seq
	running []*seq

	busy     bool
	stepEnd  time.Time
	stepEmit []*seq // sequences that emit a token at stepEnd
	prefills []*seq // sequences whose prefill completes at stepEnd

	// steps counts finished steps; busy sums their modelled durations.
	steps    int64
	busyTime time.Duration
}

func newBatchEngine(c costs, cache *prefixCache, maxSeqs int, seed uint64) *batchEngine {
	return &batchEngine{c: c, cache: cache, maxSeqs: maxSeqs, rng: rand.New(rand.NewPCG(seed, 0x22))}
}

func (e *batchEngine) load() (int, int) { return len(e.running), len(e.waiting) }

func (e *batchEngine) add(s *seq) {
	e.waiting = append(e.waiting, s)
	if !e.busy {
		// an idle engine starts its next step when the request arrived
		start := s.arrival
		if start.Before(e.stepEnd) {
			start = e.stepEnd
		}
		e.plan(start)
	}
}

func (e *batchEngine) advance(now time.Time) time.Time {
	for e.busy && !e.stepEnd.After(now) {
		e.finishStep()
		e.plan(e.stepEnd)
	}
	if e.busy {
		return e.stepEnd
	}
	return time.Time{}
}

// finishStep releases the tokens of the step ending at stepEnd.
func (e *batchEngine) finishStep() {
	e.steps++
	for _, s := range e.prefills {
		s.prefillDone = true
		if e.cache != nil {
			e.cache.insert(s.blocks)
		}
	}
	for _, s := range e.stepEmit {
		if !s.cancelled.Load() {
			s.emit(e.stepEnd)
		}
	}
	e.stepEmit, e.prefills = e.stepEmit[:0], e.prefills[:0]
	// retire finished and cancelled sequences, freeing their slots
	kept := e.running[:0]
	for _, s := range e.running {
		switch {
		case s.cancelled.Load():
			s.done.Store(true)
		case s.prefillDone && s.emitted >= s.total():
			if s.total() == 0 {
				s.firstToken, s.lastToken = e.stepEnd, e.stepEnd
				s.done.Store(true)
				s.signal()
			}
		default:
			kept = append(kept, s)
		}
	}
	clear(e.running[len(kept):])
	e.running = kept
	e.busy = false
}

// plan starts the step beginning at start, if there is work.
func (e *batchEngine) plan(start time.Time) {
	// admit waiting sequences that have arrived, FIFO, while slots are free
	for len(e.waiting) > 0 && (e.maxSeqs <= 0 || len(e.running) < e.maxSeqs) {
		s := e.waiting[0]
		if s.arrival.After(start) {
			break
		}
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
		if s.cancelled.Load() {
			s.done.Store(true)
			continue
		}
		admitPrefill(s, e.cache, start)
		e.running = append(e.running, s)
	}
	if len(e.running) == 0 {
		if len(e.waiting) > 0 {
			// nothing runs; an empty step ends when the first waiter arrives
			e.busy = true
			e.stepEnd = e.waiting[0].arrival
		}
		return
	}
	needPrefill := false
	for _, s := range e.running {
		if !s.prefillDone {
			needPrefill = true
			break
		}
	}
	// The fixed cost of a forward pass is paid once per step: itl-ms for a
	// step that decodes, prefill-ms for a step that only prefills and starts
	// some prompt. A lone request therefore costs exactly the formula.
	var dur float64
	decoding, starting, startScale := 0, false, 0.0
	for _, s := range e.running {
		switch {
		case !s.prefillDone:
			n := s.uncached - s.prefilled
			if e.c.chunk > 0 && n > e.c.chunk {
				n = e.c.chunk
			}
			if s.prefilled == 0 {
				starting, startScale = true, max(startScale, s.prefillScale())
			}
			dur += (e.c.prefillMs(s.prefilled, n) - e.c.prefillMs(0, 0)*boolf(s.prefilled == 0)) * s.prefillScale()
			s.prefilled += n
			if s.prefilled == s.uncached {
				e.prefills = append(e.prefills, s)
				if s.total() > 0 {
					e.stepEmit = append(e.stepEmit, s)
				}
			}
		case s.emitted < s.total() && (e.c.chunk > 0 || !needPrefill):
			// without chunked prefill a prefill step holds every decode back
			decoding++
			e.stepEmit = append(e.stepEmit, s)
		}
	}
	switch {
	case decoding > 0:
		dur += e.c.itlMs(e.rng, decoding)
	case starting:
		dur += e.c.overhead * startScale
	}
	e.busy = true
	e.stepEnd = start.Add(ms(dur))
	e.busyTime += ms(dur)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
