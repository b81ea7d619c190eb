// Package llm provides the answer generators behind pipeline.Generator:
// streaming clients for OpenAI-compatible chat completions, Anthropic's
// Messages API and Ollama's native /api/chat, each timed with
// net/http/httptrace and classified into actionable errors, and the embedded
// extractive generator that answers from the retrieved sources with no
// network.
//
// Every generator reports what it observed as a pipeline.Generation so the
// pipeline can split the time to first token into llm_connect, llm_prefill
// and llm_decode, with the server's own queue, load and prefill times when it
// reports them.
//
// The three HTTP providers live in this one package, not in llm/openai,
// llm/anthropic and llm/ollama: they differ only in a dialect (request body,
// headers, stream parser, models list, about 150 lines each), while the parts
// that must behave identically for all of them (retries before the first
// token, the TTFT and overall timeouts, error classification) live once in
// client.go and errors.go. Sub-packages would have to export that shared
// machinery or copy it; one package keeps it unexported and in one place.
// What every outbound HTTP call shares with the embedders and rerankers
// (the pooled transport, httptrace timing, the retry on a stale keep-alive
// connection, key scrubbing) is the upstream package's.
package llm
