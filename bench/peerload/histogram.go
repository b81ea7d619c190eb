package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
)

// The histograms a held run reads from the targets' /metrics pages.
const (
	// schedLatencies is how long runnable goroutines waited for a CPU
	// (runtime/metrics /sched/latencies:seconds, which the runtime
	// samples), on ragtime's /metrics and the relay's.
	schedLatencies = "go_sched_latencies_seconds"
	// answerLag is how late llmsim's embedding and rerank answers woke
	// past their modelled latency, on llmsim's /metrics.
	answerLag = "llmsim:answer_lag_seconds"
)

// histogram is a Prometheus histogram of durations: upper holds the
// buckets' upper bounds in seconds (the last +Inf), cum their cumulative
// counts.
type histogram struct {
	upper []float64
	cum   []float64
}

// readHistogram reads the first series of the histogram name from a
// Prometheus text page.
func readHistogram(ctx context.Context, hc *http.Client, url, name string) (*histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading %s: %s", url, resp.Status)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	fam := fams[name]
	if fam == nil || len(fam.GetMetric()) == 0 || fam.GetMetric()[0].GetHistogram() == nil {
		return nil, fmt.Errorf("%s has no %s histogram", url, name)
	}
	h := fam.GetMetric()[0].GetHistogram()
	w := &histogram{}
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue // the +Inf bucket is the sample count, added below
		}
		w.upper = append(w.upper, b.GetUpperBound())
		w.cum = append(w.cum, float64(b.GetCumulativeCount()))
	}
	w.upper = append(w.upper, math.Inf(1))
	w.cum = append(w.cum, float64(h.GetSampleCount()))
	return w, nil
}

// since returns what was counted after before (the same histogram, read
// earlier).
func (w *histogram) since(before *histogram) *histogram {
	d := &histogram{upper: w.upper, cum: make([]float64, len(w.cum))}
	for i := range w.cum {
		d.cum[i] = w.cum[i]
		if i < len(before.cum) {
			d.cum[i] -= before.cum[i]
		}
	}
	return d
}

// count is how many durations the histogram holds.
func (w *histogram) count() int { return int(w.cum[len(w.cum)-1]) }

// over is the share of the durations longer than the first bucket bound at
// or above min seconds, and that bound (the histogram's resolution).
func (w *histogram) over(min float64) (share, bound float64) {
	total := w.cum[len(w.cum)-1]
	for i, u := range w.upper {
		if u >= min {
			if total == 0 {
				return 0, u
			}
			return (total - w.cum[i]) / total, u
		}
	}
	return 0, math.Inf(1)
}

// String says which share of the durations were longer than about 1 and
// 10 ms.
func (w *histogram) String() string {
	var parts []string
	for _, min := range []float64{0.0009, 0.009} {
		share, bound := w.over(min)
		parts = append(parts, fmt.Sprintf("%.1f %% over %.2g ms", 100*share, bound*1000))
	}
	return strings.Join(parts, ", ")
}

// histogramBetween reads name from url now and returns a func that reads
// it again and returns what was counted in between; an error at either end
// is returned by the func.
func histogramBetween(ctx context.Context, hc *http.Client, url, name string) func() (*histogram, error) {
	before, err := readHistogram(ctx, hc, url, name)
	return func() (*histogram, error) {
		if err != nil {
			return nil, err
		}
		after, err := readHistogram(ctx, hc, url, name)
		if err != nil {
			return nil, err
		}
		return after.since(before), nil
	}
}
