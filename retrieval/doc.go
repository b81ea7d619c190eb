// Package retrieval provides ragtime's embedded defaults for the embed and
// search stages — a lexical feature-hashing embedder and an in-process vector
// index (an HNSW graph over a flat slab, or exact search) persisted under the
// data dir — and the ingestion that fills it or any other Store. It needs no
// network and no keys, so `ragtime serve` and `ragtime ingest` work out of the
// box; retrieval/qdrant, retrieval/openai and retrieval/ollama are the real
// backends.
package retrieval
