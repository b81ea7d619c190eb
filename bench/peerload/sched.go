package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
)

// schedWaits is a go_sched_latencies_seconds histogram (runtime/metrics
// /sched/latencies:seconds, which the runtime samples): how long runnable
// goroutines waited for a CPU. upper holds the buckets' upper bounds in
// seconds, cum the cumulative counts.
type schedWaits struct {
	upper []float64
	cum   []float64
}

// readSchedLatencies reads go_sched_latencies_seconds from a Prometheus
// text page (ragtime's /metrics, or the relay's).
func readSchedLatencies(ctx context.Context, hc *http.Client, url string) (*schedWaits, error) {
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
	fam := fams["go_sched_latencies_seconds"]
	if fam == nil || len(fam.GetMetric()) == 0 || fam.GetMetric()[0].GetHistogram() == nil {
		return nil, fmt.Errorf("%s has no go_sched_latencies_seconds histogram", url)
	}
	h := fam.GetMetric()[0].GetHistogram()
	w := &schedWaits{}
	for _, b := range h.GetBucket() {
		w.upper = append(w.upper, b.GetUpperBound())
		w.cum = append(w.cum, float64(b.GetCumulativeCount()))
	}
	w.upper = append(w.upper, math.Inf(1))
	w.cum = append(w.cum, float64(h.GetSampleCount()))
	return w, nil
}

// since returns the waits counted after before (the same histogram, read
// earlier).
func (w *schedWaits) since(before *schedWaits) *schedWaits {
	d := &schedWaits{upper: w.upper, cum: make([]float64, len(w.cum))}
	for i := range w.cum {
		d.cum[i] = w.cum[i]
		if i < len(before.cum) {
			d.cum[i] -= before.cum[i]
		}
	}
	return d
}

// count is how many waits the histogram holds.
func (w *schedWaits) count() int { return int(w.cum[len(w.cum)-1]) }

// over is the share of the waits that were longer than the bucket bound at
// or above min seconds (the histogram's resolution: its bounds grow about
// elevenfold).
func (w *schedWaits) over(min float64) (share, bound float64) {
	total := w.cum[len(w.cum)-1]
	if total == 0 {
		return 0, min
	}
	for i, u := range w.upper {
		if u >= min {
			return (total - w.cum[i]) / total, u
		}
	}
	return 0, math.Inf(1)
}

// String says which share of the waits were longer than about 1 and 10 ms.
func (w *schedWaits) String() string {
	var parts []string
	for _, min := range []float64{0.0009, 0.009} {
		share, bound := w.over(min)
		parts = append(parts, fmt.Sprintf("%.1f %% over %.2g ms", 100*share, bound*1000))
	}
	return strings.Join(parts, ", ")
}
