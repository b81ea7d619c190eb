// Package openaiwire declares OpenAI's chat completions wire shapes once, for
// the three places ragtime speaks them: llm's OpenAI client sends a
// ChatRequest and reads a streamed Usage, api's OpenAI-compatible front door
// writes Chunk objects (streamed and whole), and llmsim, the simulator, reads
// a ChatRequest and writes the same chunks, usage, errors and model lists.
// Declared once, the client, the server and the simulator cannot drift apart.
//
// The types hold only what ragtime reads or writes. A reader that must
// tolerate providers' variations (llm's stream decoder) embeds them in its own
// lenient view rather than loosening them here.
package openaiwire
