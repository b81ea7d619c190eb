// Package tracing sends ragtime's queries to an OpenTelemetry backend
// (Jaeger, Tempo, Honeycomb, Datadog, Langfuse: anything that takes OTLP) as
// one trace per query, and carries W3C trace context in and out.
//
// A Tracer implements pipeline.Tracer. Each query is a root span whose
// children are its stages, with exactly the start and duration the pipeline
// measured and stored in Postgres (the spans are built from the record's
// stages, on the query's clock, rounded to the microsecond as stored), the
// three generation stages grouped under a "chat {model}" span carrying the
// OpenTelemetry GenAI semantic-convention attributes (docs/tracing.md).
//
// The request path only starts the root span and hands the finished record
// to a bounded queue; a background goroutine builds the stage spans and
// passes them to a batching span processor, so export never blocks or slows
// an answer. What the queue could not take is counted (Stats) and shown in
// /metrics.
//
// Configuration follows the OpenTelemetry specification: the
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout, compression,
// certificates, protocol), OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER
// are read by the SDK and its exporters; serve's --otlp-endpoint and
// --otlp-protocol override the endpoint and protocol. With nothing
// configured Setup returns a nil *Tracer, and the pipeline runs without a
// Tracer at no cost.
package tracing
