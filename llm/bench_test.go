package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"ragtime/pipeline"
)

// benchStream is an OpenAI stream of n content chunks shaped like
// api.openai.com's, plus the role, finish and usage chunks and [DONE].
func benchStream(n int) []byte {
	const head = `"id":"chatcmpl-AbCdEf0123456789","object":"chat.completion.chunk","created":1764400000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1"`
	var b bytes.Buffer
	fmt.Fprintf(&b, "data: {%s,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", head)
	for i := range n {
		fmt.Fprintf(&b, "data: {%s,\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token%d\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", head, i)
	}
	fmt.Fprintf(&b, "data: {%s,\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n", head)
	fmt.Fprintf(&b, "data: {%s,\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":%d,\"total_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":1024},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n", head, n, 1200+n)
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkOpenAIStreamParse measures the client's own cost per streamed
// chunk: SSE framing, JSON decoding, timing and the emit call.
func BenchmarkOpenAIStreamParse(b *testing.B) {
	const chunks = 1000
	stream := benchStream(chunks)
	emit := func(pipeline.Delta) error { return nil }
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for b.Loop() {
		var gen pipeline.Generation
		sr := streamReader{gen: &gen, emit: emit}
		if err := sr.run(bytes.NewReader(stream)); err != nil || gen.Chunks != chunks {
			b.Fatalf("run: %v, %d chunks", err, gen.Chunks)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	total := float64(b.N) * chunks
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/chunk")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/total, "allocs/chunk")
}

// BenchmarkOpenAIRoundTrip measures one whole call of 20 chunks against a
// loopback server on a reused keep-alive connection: the client-side
// overhead a real provider's latency is added to.
func BenchmarkOpenAIRoundTrip(b *testing.B) {
	stream := benchStream(20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(stream)
	}))
	defer srv.Close()
	g, err := NewOpenAI(OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "m", APIKey: testKey})
	if err != nil {
		b.Fatal(err)
	}
	defer g.CloseIdleConnections()
	emit := func(pipeline.Delta) error { return nil }
	b.ReportAllocs()
	var connect, prefill time.Duration
	for b.Loop() {
		gen, err := generate(context.Background(), g, testRequest, emit)
		if err != nil {
			b.Fatal(err)
		}
		connect += gen.GotConn.Sub(gen.RequestStart)
		prefill += gen.FirstToken.Sub(gen.WroteRequest)
	}
	b.ReportMetric(float64(connect.Nanoseconds())/float64(b.N), "ns-connect/op")
	b.ReportMetric(float64(prefill.Nanoseconds())/float64(b.N), "ns-prefill/op")
}

// benchSources are five chunks of about 120 words, like a top-5 context.
func benchSources() []pipeline.Source {
	base := []string{
		"Time to first token (TTFT) is what a user feels. Once the first token shows, they wait for the rest. Inter-token latency only needs to beat reading speed, about three to five English words a second. Streaming does not make the model faster; it moves the user's anchor from end-to-end time to TTFT.",
		"TTFT is set by input length, not output length. Prefill reads the whole prompt in one parallel pass, and its cost grows about quadratically with prompt tokens. Decode then emits one token at a time and is bound by memory bandwidth.",
		"In RAG, TTFT also holds everything before the model sees the prompt: query embedding, vector search, rerank and context assembly. Published breakdowns put retrieval plus long context at 45 to 47 percent of TTFT.",
		"A reused keep-alive connection skips DNS, TCP and TLS. The first request on a cold client pays them, often tens to hundreds of milliseconds. Measure medians and tails over repeated runs; a single run lies.",
		"Under load TTFT goes bimodal because of head-of-line blocking behind long prefills. Chunked prefill trims that tail. Prefix caching reuses the KV cache for a stable prompt prefix and cuts prefill, so stable parts go first and volatile parts last.",
	}
	out := make([]pipeline.Source, len(base))
	for i, t := range base {
		out[i] = pipeline.Source{Rank: i + 1, Text: t + " " + t}
	}
	return out
}

var errFirstWord = errors.New("first word")

// BenchmarkExtractive measures the extractive generator's time to its first
// word over a five-chunk context (ns/op is the time to first word), and the
// whole answer.
func BenchmarkExtractive(b *testing.B) {
	sources := benchSources()
	words := 0
	for _, s := range sources {
		words += len(strings.Fields(s.Text))
	}
	req := pipeline.GenerateRequest{Question: "Why does prefill time grow with the prompt tokens?", Sources: sources, MaxTokens: 256}
	x := NewExtractive()
	b.Run("first-word", func(b *testing.B) {
		b.ReportAllocs()
		stop := func(pipeline.Delta) error { return errFirstWord }
		for b.Loop() {
			if _, err := generate(context.Background(), x, req, stop); err != errFirstWord {
				b.Fatalf("Generate: %v", err)
			}
		}
		b.ReportMetric(float64(words), "context-words")
	})
	b.Run("whole-answer", func(b *testing.B) {
		b.ReportAllocs()
		emit := func(pipeline.Delta) error { return nil }
		for b.Loop() {
			if _, err := generate(context.Background(), x, req, emit); err != nil {
				b.Fatalf("Generate: %v", err)
			}
		}
	})
}

// anthropicBenchStream is a Messages API stream of n text deltas, shaped
// like api.anthropic.com's.
func anthropicBenchStream(n int) []byte {
	var b bytes.Buffer
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":42,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":1800,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" token%d\"}}\n\n", i)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	fmt.Fprintf(&b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", n)
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.Bytes()
}

// ollamaBenchStream is an /api/chat NDJSON stream of n content chunks.
func ollamaBenchStream(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-11-29T10:00:00.%06dZ\",\"message\":{\"role\":\"assistant\",\"content\":\" token%d\"},\"done\":false}\n", i, i)
	}
	fmt.Fprintf(&b, "{\"model\":\"qwen3:8b\",\"created_at\":\"2025-11-29T10:00:01Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\"total_duration\":1532000000,\"load_duration\":1204500,\"prompt_eval_count\":412,\"prompt_eval_duration\":96250000,\"eval_count\":%d,\"eval_duration\":220000000}\n", n)
	return b.Bytes()
}

// BenchmarkStreamParse measures each provider's parser per streamed chunk:
// framing, JSON decoding, timing and the emit call (compare with
// BenchmarkOpenAIStreamParse, the same for OpenAI's format).
func BenchmarkStreamParse(b *testing.B) {
	const chunks = 1000
	cases := []struct {
		name   string
		stream []byte
		parser func(*pipeline.Generation, func(pipeline.Delta) error) stream
	}{
		{"openai", benchStream(chunks), openaiDialect{}.newStream2},
		{"anthropic", anthropicBenchStream(chunks), anthropicDialect{}.newStream2},
		{"ollama", ollamaBenchStream(chunks), ollamaDialect{}.newStream2},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			emit := func(pipeline.Delta) error { return nil }
			b.SetBytes(int64(len(c.stream)))
			b.ReportAllocs()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b.ResetTimer()
			for b.Loop() {
				var gen pipeline.Generation
				if err := c.parser(&gen, emit).run(bytes.NewReader(c.stream)); err != nil || gen.Chunks != chunks {
					b.Fatalf("run: %v, %d chunks", err, gen.Chunks)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			total := float64(b.N) * chunks
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/chunk")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/total, "allocs/chunk")
		})
	}
}
