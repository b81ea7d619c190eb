// Package lexical splits text into normalised words and scores texts against
// a query with BM25. It is the shared word-level view behind the hash
// embedder, the BM25 reranker and the extractive generator, so all three
// agree on what a "word" is.
package lexical
