// Package openai embeds texts through an OpenAI-compatible /embeddings
// endpoint (OpenAI, vLLM, TEI, TaoToken, Ollama's /v1) with langchaingo's
// embeddings and openai client. Failures are classified into the embed_*
// codes of package retrieval.
package openai
