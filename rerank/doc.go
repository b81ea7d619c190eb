// Package rerank holds the rerankers behind the rerank stage. BM25 is the
// embedded default: lexical relevance of each candidate chunk to the
// question, with no model and no network; HTTP calls a cross-encoder server
// in the TEI or Cohere/Jina request shape.
package rerank
