package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"ragtime"
	"ragtime/pipeline"
)

// The stream parsers read bytes an upstream (or anything between it and
// us) chose. Each fuzz target checks two things: any body at all parses
// without a panic into well-formed deltas or a bad-stream error; and a valid
// stream of arbitrary tokens, cut into arbitrary reads, yields exactly those
// tokens in order.

// chunkedReader returns data in reads of the sizes in sizes (cycled; 1 to
// 256 bytes), so lines, events and UTF-8 sequences are split across reads.
type chunkedReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n = int(r.sizes[r.i%len(r.sizes)]) + 1
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

type streamFactory func(*pipeline.Generation, func(pipeline.Delta) error) stream

// parseAll runs a parser over body and returns what it emitted.
func parseAll(newStream streamFactory, body io.Reader) ([]pipeline.Delta, stream, error) {
	var gen pipeline.Generation
	var got []pipeline.Delta
	st := newStream(&gen, func(d pipeline.Delta) error {
		got = append(got, d)
		return nil
	})
	err := st.run(body)
	return got, st, err
}

// checkAnyBody is the invariant for arbitrary input: no panic; every delta
// is non-empty valid UTF-8 and arrives in time order; an error is a
// *ragtime.Error with a code (llm_bad_stream, or the code of an error the
// provider reported mid-stream) and a message.
func checkAnyBody(t *testing.T, newStream streamFactory, body, sizes []byte) {
	got, _, err := parseAll(newStream, &chunkedReader{data: body, sizes: sizes})
	for i, d := range got {
		if d.Text == "" || !utf8.ValidString(d.Text) {
			t.Fatalf("delta %d is %q: empty or not UTF-8", i, d.Text)
		}
		if i > 0 && d.At.Before(got[i-1].At) {
			t.Fatalf("delta %d arrived before delta %d", i, i-1)
		}
	}
	if err != nil {
		var pe *ragtime.Error
		if !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "llm_") || pe.Message == "" {
			t.Fatalf("error %v (%T): want a *ragtime.Error with an llm_ code and a message", err, err)
		}
	}
}

// fuzzTokens splits the fuzzer's string into tokens on '\x1f', made valid
// UTF-8 (JSON cannot carry anything else) and non-empty (parsers drop empty
// deltas). reasoning marks which are reasoning deltas by the bits of mask.
func fuzzTokens(s string, mask uint64) (tokens []string, reasoning []bool) {
	for i, tok := range strings.Split(s, "\x1f") {
		tok = strings.ToValidUTF8(tok, "\uFFFD")
		if tok == "" {
			continue
		}
		tokens = append(tokens, tok)
		reasoning = append(reasoning, mask>>(i%64)&1 == 1)
	}
	return tokens, reasoning
}

// checkTokens is the invariant for a valid stream: the parser emits exactly
// the tokens, in order, each with its kind, and sees the end.
func checkTokens(t *testing.T, newStream streamFactory, body []byte, sizes []byte, tokens []string, reasoning []bool) {
	got, st, err := parseAll(newStream, &chunkedReader{data: body, sizes: sizes})
	if err != nil {
		t.Fatalf("a valid stream of %d tokens failed: %v\n%s", len(tokens), err, body)
	}
	if !st.ended() {
		t.Fatalf("a valid stream's end was not seen:\n%s", body)
	}
	if len(got) != len(tokens) {
		t.Fatalf("emitted %d deltas for %d tokens:\n%s", len(got), len(tokens), body)
	}
	for i := range tokens {
		if got[i].Text != tokens[i] || got[i].Reasoning != reasoning[i] {
			t.Fatalf("delta %d is %q (reasoning %v), want %q (reasoning %v)", i, got[i].Text, got[i].Reasoning, tokens[i], reasoning[i])
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func openAIStream(tokens []string, reasoning []bool) []byte {
	var b strings.Builder
	for i, tok := range tokens {
		field := "content"
		if reasoning[i] {
			field = "reasoning_content"
		}
		fmt.Fprintf(&b, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{%q:%s}}]}\n\n", field, jsonString(tok))
	}
	b.WriteString("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	return []byte(b.String())
}

func anthropicStreamBody(tokens []string, reasoning []bool) []byte {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n")
	for i, tok := range tokens {
		kind, field := "text_delta", "text"
		if reasoning[i] {
			kind, field = "thinking_delta", "thinking"
		}
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":%q,%q:%s}}\n\n", kind, field, jsonString(tok))
	}
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return []byte(b.String())
}

func ollamaStreamBody(tokens []string, reasoning []bool) []byte {
	var b strings.Builder
	for i, tok := range tokens {
		field := "content"
		if reasoning[i] {
			field = "thinking"
		}
		fmt.Fprintf(&b, "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",%q:%s},\"done\":false}\n", field, jsonString(tok))
	}
	b.WriteString("{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"eval_count\":2}\n")
	return []byte(b.String())
}

// addStreamSeeds adds the recorded fixtures and a few hand-made streams.
func addStreamSeeds(f *testing.F, fixtures ...string) {
	for _, name := range fixtures {
		raw, err := readFixture(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, "", []byte{255}, uint64(0))
	}
	f.Add([]byte{}, "Hello\x1f world\x1f!", []byte{0, 3, 7}, uint64(1))
	f.Add([]byte("data: [DONE]\n\n"), "é\x1f\xff\x1f日本", []byte{1}, uint64(2))
}

func FuzzOpenAIStream(f *testing.F) {
	addStreamSeeds(f, "basic.sse", "crlf_keepalive.sse", "reasoning_content.sse", "error_midstream.sse", "truncated.sse", "paced_groq_usage.sse", "paced_llamacpp_timings.sse")
	f.Fuzz(func(t *testing.T, raw []byte, toks string, sizes []byte, mask uint64) {
		newStream := openaiDialect{}.newStream2
		checkAnyBody(t, newStream, raw, sizes)
		tokens, reasoning := fuzzTokens(toks, mask)
		checkTokens(t, newStream, openAIStream(tokens, reasoning), sizes, tokens, reasoning)
	})
}

func FuzzAnthropicStream(f *testing.F) {
	addStreamSeeds(f, "paced_anthropic_thinking.sse", "paced_anthropic_error.sse")
	f.Fuzz(func(t *testing.T, raw []byte, toks string, sizes []byte, mask uint64) {
		newStream := anthropicDialect{}.newStream2
		checkAnyBody(t, newStream, raw, sizes)
		tokens, reasoning := fuzzTokens(toks, mask)
		checkTokens(t, newStream, anthropicStreamBody(tokens, reasoning), sizes, tokens, reasoning)
	})
}

func FuzzOllamaStream(f *testing.F) {
	addStreamSeeds(f, "paced_ollama_thinking.ndjson")
	f.Fuzz(func(t *testing.T, raw []byte, toks string, sizes []byte, mask uint64) {
		newStream := ollamaDialect{}.newStream2
		checkAnyBody(t, newStream, raw, sizes)
		tokens, reasoning := fuzzTokens(toks, mask)
		checkTokens(t, newStream, ollamaStreamBody(tokens, reasoning), sizes, tokens, reasoning)
	})
}

// readFixture reads testdata/name without its "#pace" directives (which
// the replay server interprets and never sends).
func readFixture(name string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		if !strings.HasPrefix(line, "#pace ") {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "")), nil
}
