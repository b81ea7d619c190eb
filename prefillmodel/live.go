// Package prefillmodel keeps the live prefill model in memory, per replica:
// the prefill_model view's fit of each provider and model, read from
// Postgres at an interval, looked up on the request path without waiting
// on storage (pipeline.TTFTPredictor).
package prefillmodel

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

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
}

type key struct{ provider, model string }

// New returns a Live with no fits yet; Refresh or Run reads them.
func New(src Source) *Live { return &Live{src: src} }

// Fit returns the latest fit of provider and model.
func (l *Live) Fit(provider, model string) (pipeline.PrefillFit, bool) {
	m := l.fits.Load()
	if m == nil {
		return pipeline.PrefillFit{}, false
	}
	f, ok := (*m)[key{provider, model}]
	return f, ok
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
