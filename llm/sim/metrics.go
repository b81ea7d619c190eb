package sim

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync/atomic"
)

// Buckets (seconds) of vLLM's histograms, so dashboards built for vLLM work.
var (
	ttftBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	lagBuckets     = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
)

// histogram is a lock-free Prometheus histogram.
type histogram struct {
	bounds []float64
	counts []atomic.Int64 // one per bound, plus +Inf
	sumµs  atomic.Int64   // sum in microseconds
	count  atomic.Int64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Int64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	if math.IsNaN(v) || v < 0 {
		v = 0
	}
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i].Add(1)
	h.sumµs.Add(int64(v * 1e6))
	h.count.Add(1)
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) float64 {
	return bucketQuantile(h.bounds, h.snapshot(), q)
}

// snapshot returns the bucket counts (the last is +Inf).
func (h *histogram) snapshot() []int64 {
	counts := make([]int64, len(h.counts))
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
	}
	return counts
}

// bucketQuantile returns the upper bound of the bucket holding quantile q
// of counts over bounds (0 when empty).
func bucketQuantile(bounds []float64, counts []int64, q float64) float64 {
	var total int64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			if i < len(bounds) {
				return bounds[i]
			}
			return math.Inf(1)
		}
	}
	return math.Inf(1)
}

func (h *histogram) write(w io.Writer, name, help, labels string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum int64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		fmt.Fprintf(w, "%s_bucket{%s,le=\"%s\"} %d\n", name, labels, strconv.FormatFloat(b, 'g', -1, 64), cum)
	}
	cum += h.counts[len(h.bounds)].Load()
	fmt.Fprintf(w, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, labels, cum)
	fmt.Fprintf(w, "%s_sum{%s} %g\n%s_count{%s} %d\n", name, labels, float64(h.sumµs.Load())/1e6, name, labels, cum)
}

// serverMetrics are the per-request figures /metrics exposes under vLLM's names.
type serverMetrics struct {
	ttft, queue, prefill, itl, e2e *histogram
	promptTokens, generationTokens atomic.Int64
	prefixQueries, prefixHits      atomic.Int64
	success                        atomic.Int64
	// firstWriteLag is how long after its modelled time the first token was
	// flushed to the client.
	firstWriteLag *histogram
	// writerLag is, per write of token chunks, how long after the modelled
	// release of the oldest token in it the write was flushed.
	writerLag *histogram
	// schedulerLag is how late the engines' drivers woke past a due step.
	schedulerLag *histogram
	// answerLag is how late embedding and rerank handlers woke past their
	// modelled latency.
	answerLag *histogram
}

func newServerMetrics() *serverMetrics {
	return &serverMetrics{
		ttft:    newHistogram(ttftBuckets),
		queue:   newHistogram(requestBuckets),
		prefill: newHistogram(requestBuckets),
		itl:     newHistogram(itlBuckets),
		e2e:     newHistogram(requestBuckets),

		firstWriteLag: newHistogram(lagBuckets),
		writerLag:     newHistogram(lagBuckets),
		schedulerLag:  newHistogram(lagBuckets),
		answerLag:     newHistogram(lagBuckets),
	}
}
