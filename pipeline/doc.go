// Package pipeline runs one question through the timed stages (accept, queue,
// embed, search, rerank, assemble, llm_connect, llm_prefill, llm_decode) on a
// single monotonic clock and derives the TTFT breakdown of docs/design.md.
//
// It declares the small interfaces it consumes (Embedder, Searcher, Reranker,
// Generator, TokenCounter, Stream); their implementations live in the
// packages named after what they wrap. The record it makes, its figures,
// the Recorder it hands the record to and the read types adapters return
// are package ragtime's, so that their users need not import the runner.
//
// pipeline.go is the runner; timing.go the query's clock and its spans;
// record.go the record's building; prompt.go the prompt's assembly; and
// spanjson.go the stream's hand-written encoders (StageSpan, AppendSpanJSON,
// AppendDoneJSON), kept apart from the logic they speed.
package pipeline
