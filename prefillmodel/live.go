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

	// latest holds, per provider and model, measured / fitted of this
	// replica's latest queries (Observe): a change of the server's load
	// shows here within a few queries, before the view's refresh.
	mu     sync.Mutex
	latest map[key]*ring
}

// ringSize is how many of the latest queries Observe keeps per model;
// minLatest how many it needs before it overrides the view's figure.
const (
	ringSize  = 8
	minLatest = 4
)

type ring struct {
	ratios [ringSize]float64
	n      int
}

type key struct{ provider, model string }

// New returns a Live with no fits yet; Refresh or Run reads them.
func New(src Source) *Live { return &Live{src: src, latest: map[key]*ring{}} }

// Fit returns the latest fit of provider and model.
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
	if r := l.latest[k]; r != nil && r.n >= minLatest {
		xs := slices.Clone(r.ratios[:min(r.n, ringSize)])
		slices.Sort(xs)
		f.RecentRatioP50 = (xs[(len(xs)-1)/2] + xs[len(xs)/2]) / 2
	}
	l.mu.Unlock()
	return f, true
}

// Observe notes a finished query of this replica: its llm_prefill_ms
// against the fitted line for its uncached prompt tokens, so that Fit's
// RecentRatioP50 follows the server within a few queries.
func (l *Live) Observe(rec ragtime.Record) {
	if rec.Status != ragtime.StatusOK || rec.LLMPrefillMs <= 0 || rec.Usage.PromptTokens <= 0 {
		return
	}
	m := l.fits.Load()
	if m == nil {
		return
	}
	k := key{rec.Provider, rec.Model}
	f, ok := (*m)[k]
	if !ok {
		return
	}
	x := float64(rec.Usage.PromptTokens)
	if c := rec.Usage.CachedTokens; c != nil {
		x -= float64(*c)
	}
	line := f.InterceptMs + f.MsPerToken*max(x, 0)
	if line <= 0 {
		return
	}
	l.mu.Lock()
	r := l.latest[k]
	if r == nil {
		r = &ring{}
		l.latest[k] = r
	}
	r.ratios[r.n%ringSize] = rec.LLMPrefillMs / line
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
