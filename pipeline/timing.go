package pipeline

import (
	"math"
	"slices"
	"time"

	"ragtime"
)

// The query's clock: its stages' spans on it (t0 is the request's arrival),
// the connection's and the prefill's attrs, and the gaps between deltas the
// inter-token latency is computed from.

// ms converts a clock reading to milliseconds since t0, µs resolution.
func (q *query) ms(at time.Time) float64 { return roundMs(at.Sub(q.t0)) }

func roundMs(d time.Duration) float64 { return float64(d.Round(time.Microsecond)) / 1e6 }

func round3(x float64) float64 {
	return float64(time.Duration(x*1e6).Round(time.Microsecond)) / 1e6
}

// span records a finished stage and sends it to out. Its attrs are attrs
// or, when that is nil and figs is set, the stage's figures there
// (stageFigs).
func (q *query) span(out Stream, name string, start, end time.Time, attrs map[string]any, figs *stageFigs) error {
	if end.Before(start) {
		end = start
	}
	s := StageSpan{Span: ragtime.Span{Name: name, Seq: len(q.spans), StartMs: q.ms(start), Attrs: attrs}}
	if attrs == nil && figs != nil {
		if s.Seq < 64 {
			s.figs = figs
			q.figged |= 1 << s.Seq
		} else {
			s.Attrs = figs.attrsMap(name)
		}
	}
	s.DurationMs = round3(q.ms(end) - s.StartMs)
	q.spans = append(q.spans, s.Span)
	if out == nil {
		return nil
	}
	return out.Stage(s)
}

// bringsEarlySpans reports whether d is the first delta, with the
// generator's timings, and llm_connect and llm_prefill are yet to be sent.
func (q *query) bringsEarlySpans(d Delta) bool {
	return d.Timing != nil && !q.earlySpans && !d.Timing.GotConn.IsZero()
}

// firstTokenSpans sends llm_connect and llm_prefill, flushed, when a hidden
// reasoning delta brought the generator's timings (a forwarded first delta
// takes them in its own write, after it: emit; framing them adds a few
// microseconds to its TTFT, where a write of their own cost a system call
// per ask). generationSpans completes their attrs with what only the end
// of the stream tells.
func (q *query) firstTokenSpans(out Stream, d Delta) error {
	if !q.bringsEarlySpans(d) {
		return nil
	}
	q.earlySpans = true
	if err := q.connectAndPrefill(out, d.Timing, d.At); err != nil {
		return clientGone(err)
	}
	if err := flush(out); err != nil {
		return clientGone(err)
	}
	return nil
}

// connectAndPrefill adds the llm_connect and llm_prefill spans of a
// generation whose connection was obtained and first token received (at
// first; zero when none came). The Generation is passed by pointer here and
// below: these run on the answer's goroutine, whose stack must stay small
// for as long as the answer streams (Pipeline.Run).
func (q *query) connectAndPrefill(out Stream, g *Generation, first time.Time) error {
	f := &q.figs
	f.conn, f.retries, f.status = g.Conn, g.Retries, g.UpstreamStatus
	if err := q.span(out, ragtime.StageLLMConnect, g.RequestStart, g.GotConn, nil, f); err != nil {
		return err
	}
	written := g.WroteRequest
	if written.IsZero() {
		written = g.GotConn
	}
	end := first
	if end.IsZero() {
		end = q.now()
	}
	var prefill map[string]any // the figures', unless the server reported timings
	if len(g.ServerTimings) > 0 {
		prefill = prefillAttrs(g)
	}
	return q.span(out, ragtime.StageLLMPrefill, written, end, prefill, f)
}

func connAttrs(g *Generation) map[string]any {
	return addConnAttrs(make(map[string]any, 6), g.Conn, g.Retries)
}

// callAttrs adds the connection attrs of an embed or rerank call to attrs,
// when a call was made, and a cache's answer when there was one.
func callAttrs(c Call, attrs map[string]any) map[string]any {
	if c.Cache != "" {
		attrs["cache"] = c.Cache
	}
	if !c.Made {
		return attrs
	}
	attrs = addConnAttrs(attrs, c.Conn, c.Retries)
	if c.ServerWait > 0 {
		attrs["server_wait_ms"] = roundMs(c.ServerWait)
	}
	return attrs
}

// addConnAttrs adds a connection's attrs to attrs (connFigs).
func addConnAttrs(attrs map[string]any, c ragtime.ConnInfo, retries int) map[string]any {
	connFigs(&attrOut{m: attrs}, c, retries)
	return attrs
}

func prefillAttrs(g *Generation) map[string]any {
	attrs := make(map[string]any, len(g.ServerTimings)+1)
	for k, v := range g.ServerTimings {
		attrs[k] = v
	}
	if g.UpstreamStatus != 0 {
		attrs["status"] = g.UpstreamStatus
	}
	return attrs
}

// generationSpans turns the generator's observations into the llm_connect,
// llm_prefill and llm_decode stages, as far as they happened. When the
// first two were sent at the first token, it only completes their attrs
// (retries, server timings from the final chunk) for the record and the
// done event.
func (q *query) generationSpans(out Stream) error {
	g := q.gen
	if g.RequestStart.IsZero() {
		return nil
	}
	if q.earlySpans {
		for i := range q.spans {
			switch q.spans[i].Name {
			case ragtime.StageLLMConnect:
				q.spans[i].Attrs, q.figged = connAttrs(g), q.figged&^(1<<i)
			case ragtime.StageLLMPrefill:
				q.spans[i].Attrs, q.figged = prefillAttrs(g), q.figged&^(1<<i)
			}
		}
	} else {
		if g.GotConn.IsZero() {
			return q.span(out, ragtime.StageLLMConnect, g.RequestStart, q.now(), nil, nil)
		}
		if err := q.connectAndPrefill(out, g, g.FirstToken); err != nil || g.FirstToken.IsZero() {
			return err
		}
	}
	first := g.FirstToken
	if first.IsZero() {
		return nil
	}
	p50, p95, pmax := q.gaps.stats()
	last := g.LastToken
	if last.IsZero() {
		last = first
	}
	return q.span(out, ragtime.StageLLMDecode, first, last, map[string]any{
		"chunks":            g.Chunks,
		"completion_tokens": q.gen.Usage.CompletionTokens,
		"itl_p50_ms":        p50,
		"itl_p95_ms":        p95,
		"itl_max_ms":        pmax,
	}, nil)
}

// maxDeltaAtCap caps the room a query reserves for its deltas' gaps up
// front (0.5 KB); a longer answer grows it.
const maxDeltaAtCap = 128

// deltaGaps holds the gaps between consecutive deltas' arrivals, in
// nanoseconds, as uint32s: the one figure the arrivals are kept for is
// the inter-token latency (stats). A gap outside 0–4.29 s moves them all
// to wide, time.Durations.
type deltaGaps struct {
	n    int           // deltas seen
	last time.Duration // the last one's arrival since t0
	gaps []uint32
	wide []time.Duration
}

// add notes a delta's arrival at (since t0); reserve is the room to make
// for the gaps at the second one.
func (g *deltaGaps) add(at time.Duration, reserve int) {
	g.n++
	gap := at - g.last
	g.last = at
	if g.n == 1 {
		return
	}
	if g.wide == nil && gap >= 0 && gap <= math.MaxUint32 {
		if g.gaps == nil {
			g.gaps = make([]uint32, 0, reserve)
		}
		g.gaps = append(g.gaps, uint32(gap))
		return
	}
	if g.wide == nil {
		g.wide = make([]time.Duration, len(g.gaps), max(reserve, len(g.gaps)+1))
		for i, x := range g.gaps {
			g.wide[i] = time.Duration(x)
		}
		g.gaps = nil
	}
	g.wide = append(g.wide, gap)
}

// stats returns the p50, p95 and max gap, in milliseconds (nearest-rank
// percentiles; zeros with fewer than two deltas). It sorts the gaps: it
// is their last reader.
func (g *deltaGaps) stats() (p50, p95, pmax float64) {
	if g.wide != nil {
		return itlStats(g.wide)
	}
	if len(g.gaps) == 0 {
		return 0, 0, 0
	}
	return itlStats(g.gaps)
}

// itlStats returns the p50, p95 and max of gaps (nanoseconds, not empty),
// in milliseconds (nearest-rank percentiles), sorting them.
func itlStats[T uint32 | time.Duration](gaps []T) (p50, p95, pmax float64) {
	slices.Sort(gaps) // roundMs keeps the order: rounding after sorting picks the same gaps
	at := func(i int) float64 { return roundMs(time.Duration(gaps[i])) }
	return at(ragtime.NearestRankIndex(len(gaps), 0.50)), at(ragtime.NearestRankIndex(len(gaps), 0.95)), at(len(gaps) - 1)
}
