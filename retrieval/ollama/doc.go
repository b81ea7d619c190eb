// Package ollama embeds texts with a model served by Ollama's native
// /api/embed endpoint, many texts per request. Failures are classified
// into the embed_* codes of package retrieval.
package ollama
