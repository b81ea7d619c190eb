// Package metrics exposes ragtime's query timings to Prometheus: per-stage
// duration, TTFT and retrieval-share histograms, query and error counters,
// the recorder's queue, and the Go and process collectors.
//
// It observes finished queries through a ragtime.Recorder decorator, after
// the stream has ended, so the request path's timings are untouched.
package metrics
