package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// idGenerator makes random trace and span ids, except that a span started
// with a context from withSpanID gets that id: the id its stage's calls
// already carried to the embedder, the store, the reranker or the model,
// before the stage's span could be built from the stored timings.
type idGenerator struct{}

type spanIDKey struct{}

// presetID is a span id for the span started directly under parent.
type presetID struct {
	parent, id trace.SpanID
}

// withSpanID returns ctx that makes the next span started with it have id.
// Only that span: the context Start returns for it inherits the value, but
// the span it carries is no longer parent, so the new span's children get
// ids of their own.
func withSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, spanIDKey{}, presetID{parent: trace.SpanContextFromContext(ctx).SpanID(), id: id})
}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, idGenerator{}.NewSpanID(ctx, tid)
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if p, ok := ctx.Value(spanIDKey{}).(presetID); ok && p.id.IsValid() &&
		p.parent == trace.SpanContextFromContext(ctx).SpanID() {
		return p.id
	}
	return newSpanID()
}

// newSpanID is a random, valid span id (math/rand/v2's generator is seeded
// from the system's randomness and safe for concurrent use).
func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
