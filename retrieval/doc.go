// Package retrieval provides ragtime's embedded defaults for the embed and
// search stages — a lexical feature-hashing embedder and an in-process vector
// index persisted under the data dir — and the ingestion that fills the index.
// It needs no network and no keys, so `ragtime serve` and `ragtime ingest`
// work out of the box.
package retrieval
