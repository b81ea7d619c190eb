// Package llm provides the answer generators behind pipeline.Generator: a
// streaming client for any OpenAI-compatible chat completions endpoint, timed
// with net/http/httptrace and classified into actionable errors, and the
// embedded extractive generator that answers from the retrieved sources with
// no network.
//
// Both report what they observed as a pipeline.Generation so the pipeline can
// split the time to first token into llm_connect, llm_prefill and llm_decode.
package llm
