// Package prefillmodel keeps the live prefill model in memory, per replica:
// the prefill_model view's fit of each provider and model, read from
// Postgres at an interval, looked up on the request path without waiting
// on storage (pipeline.TTFTPredictor).
package prefillmodel

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"ragtime"
	"ragtime/pipeline"
)

var _ pipeline.TTFTPredictor = (*Live)(nil)

// Source reads the fits; *postgres.Store implements it.
type Source interface {
	PrefillModel(ctx context.Context) ([]pipeline.PrefillFit, error)
}

// Live holds the latest fits. It is safe for concurrent use.
type Live struct {
	src  Source
	fits atomic.Pointer[map[key]pipeline.PrefillFit]

	// latest holds, per provider and model, this replica's latest
	// queries as they finish (Observe): a change of the server's load
	// shows here within two queries, before the view's refresh.
	mu     sync.Mutex
	latest map[key]*ring
}

// The replica's level of measured / fitted (docs/ttft.md, "Following the
// server"): ringSize latest queries are kept per model; a rise shows as
// soon as the riseQueries latest all stand more than riseMargin above
// the median of the slowWindow latest (the level is then the least of
// them), a fall only through that median, once minLatest queries are in.
// The overhead (what the stages leave of TTFT) is taken at overheadQ over
// the ring.
const (
	ringSize    = 16
	slowWindow  = 8
	minLatest   = 4
	riseQueries = 2
	riseMargin  = 1.1
	overheadQ   = 0.9
)

// sample is one finished query: its uncached prompt tokens, its
// llm_prefill_ms and its overhead_ms. The ratio to the fitted line is taken
// when Fit is asked, against the line of that moment, so that a refresh of
// the line between the query and the ask does not count a slowdown twice.
type sample struct{ tokens, prefillMs, overheadMs float64 }

type ring struct {
	s [ringSize]sample
	n int
}

// newest returns the i-th newest sample (0: the newest).
func (r *ring) newest(i int) sample { return r.s[(r.n-1-i)%ringSize] }

type key struct{ provider, model string }

// New returns a Live with no fits yet; Refresh or Run reads them.
func New(src Source) *Live { return &Live{src: src, latest: map[key]*ring{}} }

// Fit returns the latest fit of provider and model, with the replica's
// level of measured / fitted (RecentRatio) and its overhead
// (RecentOverheadMs) from its latest queries.
func (l *Live) Fit(provider, model string) (pipeline.PrefillFit, bool) {
	m := l.fits.Load()
	if m == nil {
		return pipeline.PrefillFit{}, false
	}
	k := key{provider, model}
	f, ok := (*m)[k]
	if !ok {
		return f, false
	}
	l.mu.Lock()
	if r := l.latest[k]; r != nil {
		f.RecentRatio, f.RecentOverheadMs = r.level(&f)
	}
	l.mu.Unlock()
	return f, true
}

// level returns the replica's level of measured / fitted against f's line
// (0: too few queries yet) and the overhead quantile. Asymmetric: the
// riseQueries latest queries raise it at once when they all stand above
// the slow median by riseMargin (a server that slowed down costs at most
// riseQueries asks predicted on the old cost), while a speedup lowers it
// only through the median of the slowWindow latest (half of them must be
// faster), so one fast query does not make the next ask overfill.
func (r *ring) level(f *pipeline.PrefillFit) (ratio, overhead float64) {
	n := min(r.n, ringSize)
	var buf [ringSize]float64
	ratios := buf[:0]
	for i := range min(n, slowWindow) {
		s := r.newest(i)
		line := f.InterceptMs + f.MsPerToken*s.tokens
		if line <= 0 {
			return 0, 0
		}
		ratios = append(ratios, s.prefillMs/line)
	}
	if n >= riseQueries {
		rise := ratios[0]
		for _, x := range ratios[1:riseQueries] {
			rise = min(rise, x)
		}
		slow := median(ratios)
		if n < minLatest {
			slow = f.RecentRatioP50 // the view's, until enough of our own
		}
		switch {
		case slow > 0 && rise > riseMargin*slow:
			ratio = rise
		case n >= minLatest:
			ratio = slow
		}
	}
	over := buf[:0]
	for i := range n {
		over = append(over, max(r.newest(i).overheadMs, 0))
	}
	slices.Sort(over)
	return ratio, ragtime.NearestRank(over, overheadQ)
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return (ys[(len(ys)-1)/2] + ys[len(ys)/2]) / 2
}

// Observe notes a finished query of this replica: its uncached prompt
// tokens, llm_prefill_ms and overhead_ms, so that Fit follows the server
// from the next ask on.
func (l *Live) Observe(rec ragtime.Record) {
	if rec.Status != ragtime.StatusOK || rec.LLMPrefillMs <= 0 || rec.Usage.PromptTokens <= 0 {
		return
	}
	x := float64(rec.Usage.PromptTokens)
	if c := rec.Usage.CachedTokens; c != nil {
		x -= float64(*c)
	}
	s := sample{tokens: max(x, 0), prefillMs: rec.LLMPrefillMs}
	if rec.OverheadMs != nil {
		s.overheadMs = *rec.OverheadMs
	}
	k := key{rec.Provider, rec.Model}
	l.mu.Lock()
	r := l.latest[k]
	if r == nil {
		r = &ring{}
		l.latest[k] = r
	}
	r.s[r.n%ringSize] = s
	r.n++
	l.mu.Unlock()
}

// Recorder returns a ragtime.Recorder that observes each finished query
// (Observe) and hands it to next.
func (l *Live) Recorder(next ragtime.Recorder) ragtime.Recorder { return observer{l, next} }

type observer struct {
	l    *Live
	next ragtime.Recorder
}

func (o observer) Record(rec ragtime.Record) {
	o.l.Observe(rec)
	o.next.Record(rec)
}

// Fits returns the latest fits, in no order.
func (l *Live) Fits() []pipeline.PrefillFit {
	m := l.fits.Load()
	if m == nil {
		return nil
	}
	out := make([]pipeline.PrefillFit, 0, len(*m))
	for _, f := range *m {
		out = append(out, f)
	}
	return out
}

// Refresh reads the fits from the source and replaces those held.
func (l *Live) Refresh(ctx context.Context) error {
	fits, err := l.src.PrefillModel(ctx)
	if err != nil {
		return fmt.Errorf("refreshing the prefill model: %w", err)
	}
	m := make(map[key]pipeline.PrefillFit, len(fits))
	for _, f := range fits {
		m[key{f.Provider, f.Model}] = f
	}
	l.fits.Store(&m)
	return nil
}

// Run refreshes every interval until ctx ends; a failed read is logged and
// the fits held are kept (a model a little old beats none).
func (l *Live) Run(ctx context.Context, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := l.Refresh(ctx); err != nil && ctx.Err() == nil {
			log.Warn("prefill model not refreshed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
