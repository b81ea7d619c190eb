// Package pipeline runs one question through the timed stages (accept, queue,
// embed, search, rerank, assemble, llm_connect, llm_prefill, llm_decode) on a
// single monotonic clock and derives the TTFT breakdown of docs/design.md.
//
// It declares the small interfaces it consumes (Embedder, Searcher, Reranker,
// Generator, TokenCounter, Recorder, Stream); their implementations live in
// the packages named after what they wrap.
//
// It owns the domain's vocabulary: the Record of a finished query (declared
// once; storage and the stream derive from it), the error codes the pipeline
// produces and IsCancelled, and the read types (QueryFilter, QueryPage,
// Stats, RecorderStats, DocumentInfo, ErrNotFound, ErrInvalidCursor) that
// adapters return and the API maps to HTTP statuses.
package pipeline
