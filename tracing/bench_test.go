package tracing

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"ragtime"
	"ragtime/pipeline"
)

// BenchmarkAsk runs whole asks in-process (the real OpenAI-compatible
// client against the simulator on loopback, zero simulated delays) without
// a tracer, as serve runs with nothing configured, and with one whose spans
// go through the batching processor to an exporter that discards them, so
// the difference is tracing's own cost per ask (request path and the
// background span building, which competes for the same cores).
//
//	go test -run '^$' -bench BenchmarkAsk -benchmem -count 6 ./tracing
func BenchmarkAsk(b *testing.B) {
	base, _ := startSim(b)
	for _, bc := range []struct {
		name string
		on   bool
	}{{"tracing=off", false}, {"tracing=on", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var tr *Tracer
			if bc.on {
				tr = newTracer(tracetest.NewNoopExporter(), resource.Empty(), 0)
				defer func() { _ = tr.Shutdown(context.Background()) }()
			}
			p := newPipeline(b, base, &ctxSearcher{keep: -1}, tr)
			req := request(b)
			b.ReportAllocs()
			var ttft, overhead []float64
			for b.Loop() {
				rec := p.Run(context.Background(), req, pipeline.Discard{})
				if rec.Status != ragtime.StatusOK {
					b.Fatalf("status %s: %s", rec.Status, rec.ErrorMessage)
				}
				ttft, overhead = append(ttft, *rec.TTFTMs), append(overhead, *rec.OverheadMs)
			}
			// What a user waits for: the TTFT and ragtime's own share of it,
			// as the pipeline measured them.
			b.ReportMetric(median(ttft), "ttft-p50-ms")
			b.ReportMetric(median(overhead), "overhead-p50-ms")
			if tr != nil {
				b.ReportMetric(float64(tr.Stats().Dropped), "dropped")
			}
		})
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return ragtime.NearestRank(s, 0.5)
}
