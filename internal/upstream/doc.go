// Package upstream is ragtime's one HTTP layer for every outbound call: the
// LLM clients (llm), the remote embedders (retrieval/openai,
// retrieval/ollama) and the HTTP reranker (rerank). Qdrant speaks gRPC and
// does not use it.
//
// It holds, once:
//   - a Pool of tuned keep-alive transports shared per upstream host (idle
//     pool sized to the caller's concurrency, unbounded without one, HTTP/2
//     when the server offers it), so concurrent asks reuse connections
//     instead of leaving sockets in TIME_WAIT;
//   - Trace, the httptrace timings of a call (reused, DNS, connect, TLS,
//     request written, first response byte), the answer's bytes timed when
//     they reached the socket where the kernel stamps them (package
//     rxstamp, on the Pool's connections);
//   - Client.Do, which sends a request again, once, on a fresh connection
//     when a reused keep-alive connection failed before any response byte
//     (the server had closed it: nothing reached the model), and
//     Client.DoIdempotent, which also retries idempotent calls (embed,
//     rerank) that failed for a reason worth retrying;
//   - Classify, the mapping of an HTTP status and error body to a Kind that
//     each caller names with its own error codes;
//   - the W3C trace context (traceparent, tracestate) of the query's trace,
//     injected into every request when tracing is on (package tracing);
//   - the bounded body reads, the Scrubber that keeps API keys out of error
//     text and RedactURL, which masks a password in a URL.
package upstream
