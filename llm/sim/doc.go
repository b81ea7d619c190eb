// Package sim is llmsim, an OpenAI-compatible inference simulator: it serves
// /v1/chat/completions and /v1/models and streams generated words on a
// configurable cost model (prefill time growing with prompt tokens, then one
// token per inter-token interval, on a step scheduler with continuous
// batching and a prefix cache), and /v1/embeddings and /rerank at fixed
// costs, so ragtime's tests, benchmarks and users get upstream models with
// known costs without spending tokens.
//
// It is a simulator, not a model: the text it streams is drawn
// deterministically from the prompt and means nothing.
package sim
