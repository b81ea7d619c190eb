package openaiwire

import (
	"bytes"
	"encoding/json"
	"testing"
)

// encodeChunk is what encoding/json (HTML escaping off) writes for c, as an
// event: the reference the ChunkEncoder must match byte for byte.
func encodeChunk(t *testing.T, c Chunk) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		t.Fatal(err)
	}
	return "data: " + string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))) + "\n\n"
}

func TestChunkEncoderMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	texts := []string{"", "word", " spaced", `quote " and \ backslash`, "<b>&</b>", "line\nbreak\ttab\x01", "naïve 日本語 🙂", "\u2028\u2029", "bad \xff utf-8"}
	for _, id := range []string{"chatcmpl-1", `odd "id"`} {
		e := NewChunkEncoder(id, "model/<x>", 1796094560, false)
		head := Chunk{ID: id, Object: ObjectChunk, Created: 1796094560, Model: "model/<x>"}
		empty := ""
		c := head
		c.Choices = []Choice{{Delta: &Delta{Role: "assistant", Content: &empty}}}
		if got, want := string(e.Role(nil)), encodeChunk(t, c); got != want {
			t.Errorf("role chunk\n got %s\nwant %s", got, want)
		}
		for _, text := range texts {
			c := head
			c.Choices = []Choice{{Delta: &Delta{Content: &text}}}
			if got, want := string(e.Delta(nil, "content", "", text)), encodeChunk(t, c); got != want {
				t.Errorf("content %q\n got %s\nwant %s", text, got, want)
			}
			spaced := " " + text
			c.Choices = []Choice{{Delta: &Delta{ReasoningContent: &spaced}}}
			if got, want := string(e.Delta(nil, "reasoning_content", " ", text)), encodeChunk(t, c); got != want {
				t.Errorf("reasoning %q\n got %s\nwant %s", text, got, want)
			}
		}
		stop := "stop"
		c.Choices = []Choice{{Delta: &Delta{}, FinishReason: &stop}}
		if got, want := string(e.Finish(nil, "stop")), encodeChunk(t, c); got != want {
			t.Errorf("finish chunk\n got %s\nwant %s", got, want)
		}
		c.Choices = []Choice{}
		c.Usage = &Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}
		if got, want := string(e.Usage(nil, c.Usage)), encodeChunk(t, c); got != want {
			t.Errorf("usage chunk\n got %s\nwant %s", got, want)
		}
	}
}

func TestChunkEncoderUsageNullWhenAsked(t *testing.T) {
	t.Parallel()
	e := NewChunkEncoder("c", "m", 1, true)
	got := string(e.Delta(nil, "content", "", "x"))
	want := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null,"logprobs":null}],"usage":null}` + "\n\n"
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	got = string(e.Usage(nil, nil, Extra{"timings", map[string]int{"prompt_n": 2}}, Extra{"bad", func() {}}))
	want = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"timings":{"prompt_n":2}}` + "\n\n"
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func BenchmarkChunkEncoderDelta(b *testing.B) {
	e := NewChunkEncoder("chatcmpl-0123456789", "llama-3.1-8b-instruct", 1796094560, false)
	buf := make([]byte, 0, 512)
	for b.Loop() {
		buf = e.Delta(buf[:0], "content", " ", "token")
	}
}
