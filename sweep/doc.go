// Package sweep measures the trade-off between top-k (and the context
// budget) and time to first token: it runs labelled questions at several
// settings through the same pipeline as /ask, in shuffled order, and
// summarises TTFT percentiles by stage next to hit@k, recall@k and MRR.
//
// It also writes the results (terminal table, CSV, JSON, an SVG and PNG
// chart) and recommends the smallest k whose recall is close to the best.
package sweep
