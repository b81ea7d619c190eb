package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestCallsCarryTheTraceContext: a call made within a traced query sends
// its W3C traceparent and tracestate; one without a trace sends none.
func TestCallsCarryTheTraceContext(t *testing.T) {
	// The propagator tracing.Setup installs as the global one.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	seen := make(chan http.Header, 2)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer ts.Close()
	state, _ := trace.ParseTraceState("ragtime=1")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xa}, SpanID: trace.SpanID{0xb},
		TraceFlags: trace.FlagsSampled, TraceState: state})
	c := NewPool(Options{}).Client(ts.URL)
	for _, ctx := range []context.Context{trace.ContextWithSpanContext(context.Background(), sc), context.Background()} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
		resp, err := c.Do(req, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	h := <-seen
	if want := "00-0a000000000000000000000000000000-0b00000000000000-01"; h.Get("traceparent") != want || h.Get("tracestate") != "ragtime=1" {
		t.Errorf("traced call sent traceparent %q tracestate %q, want %q", h.Get("traceparent"), h.Get("tracestate"), want)
	}
	if h := <-seen; h.Get("traceparent") != "" {
		t.Errorf("untraced call sent traceparent %q", h.Get("traceparent"))
	}
}
