package llm

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"ragtime/pipeline"
)

// TestFastChunkAgreesWithFullDecode: every chunk the fast path takes yields
// exactly the deltas and finish state of the full encoding/json decode, and
// the chunks it must not take (usage, errors, odd types, case variants,
// repeats, bad UTF-8, bad JSON) are left to the full decode.
func TestFastChunkAgreesWithFullDecode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		chunk string
		fast  bool
	}{
		{`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`, true},
		{`{"choices":[{"delta":{"content":"a \"quoted\" \u00e9 \n word"},"finish_reason":null}],"usage":null}`, true},
		{`{"choices":[{"delta":{"reasoning_content":"think","content":null},"finish_reason":null}]}`, true},
		{`{"choices":[{"delta":{"reasoning":"think","content":"and say"}}]}`, true},
		{`{"choices":[{"delta":{},"finish_reason":"stop"}]}`, true},
		{`{"choices":[]}`, true},
		{`{"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, true},
		{`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"},"finish_reason":"length"}]}`, true},
		{`{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, false},
		{`{"choices":[{"delta":{"content":"x"}}],"error":{"message":"boom"}}`, false},
		{`{"choices":[{"delta":{"content":"x"}}],"timings":{"prompt_ms":1}}`, false},
		{`{"choices":[{"delta":{"content":"x"}}],"Usage":null}`, false},
		{`{"Choices":[{"delta":{"content":"x"}}]}`, false},
		{`{"choices":[{"delta":{"content":"x"}}],"choices":[]}`, false},
		{`{"choices":[{"delta":{"content":"x","content":"y"}}]}`, false},
		{`{"choices":[{"delta":{"Content":"x"}}]}`, false},
		{`{"choices":[{"delta":{"content":["x"]}}]}`, false},
		{`{"choices":[{"delta":{"content":7}}]}`, false},
		{`{"choices":[{"delta":null}]}`, false},
		{`{"choices":[{"delta":{"content":"x"},"finish_reason":3}]}`, false},
		{`{"choices":null}`, false},
		{"{\"choices\":[{\"delta\":{\"content\":\"bad \xff utf8\"}}]}", false},
		{`{"choices":[{"delta":{"content":"x"}}]`, false},
		{`[1,2]`, false},
	}
	for _, c := range cases {
		var fastGot, fullGot []pipeline.Delta
		gen1, gen2 := pipeline.Generation{}, pipeline.Generation{}
		fast := &streamReader{gen: &gen1, emit: func(d pipeline.Delta) error { fastGot = append(fastGot, d); return nil }}
		full := &streamReader{gen: &gen2, emit: func(d pipeline.Delta) error { fullGot = append(fullGot, d); return nil }}
		at := time.Now()
		handled, err := fast.fastChunk([]byte(c.chunk), at)
		if handled != c.fast {
			t.Errorf("%s: fast path handled %v, want %v", c.chunk, handled, c.fast)
			continue
		}
		if !handled {
			if len(fastGot) > 0 {
				t.Errorf("%s: not handled but delivered %v", c.chunk, fastGot)
			}
			continue
		}
		ferr := full.fullChunk([]byte(c.chunk), at)
		if (err != nil) != (ferr != nil) || !reflect.DeepEqual(strip(fastGot), strip(fullGot)) || fast.finished != full.finished {
			t.Errorf("%s: fast %v %v finished %v; full %v %v finished %v", c.chunk, strip(fastGot), err, fast.finished, strip(fullGot), ferr, full.finished)
		}
	}
}

// strip keeps what the comparison needs (At is the same on both sides;
// Timing pointers differ by address).
func strip(ds []pipeline.Delta) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%v:%q", d.Reasoning, d.Text)
	}
	return out
}

// TestFoldsToIsEqualFold: foldsTo answers as strings.EqualFold for every
// known key against keys that fold to it, differ from it, or start with
// any byte.
func TestFoldsToIsEqualFold(t *testing.T) {
	t.Parallel()
	known := append(slices.Clone(chunkKeys), "choices", "delta", "finish_reason", "content", "reasoning_content", "reasoning")
	keys := []string{"", "id", "object", "Usage", "USAGE", "uſage", "\u212Aey", "x_Groq", "X_GROQ", "_x", "1", "Choices", "CHOICES", "çhoices", "Delta", "finish_Reason", "contenT", "Reasoning_content"}
	for b := range 256 {
		keys = append(keys, string([]byte{byte(b)})+"sage", string([]byte{byte(b)})+"hoices")
	}
	for _, kn := range known {
		for _, k := range keys {
			if got, want := foldsTo(k, kn), strings.EqualFold(k, kn); got != want {
				t.Errorf("foldsTo(%q, %q) = %v, EqualFold says %v", k, kn, got, want)
			}
		}
	}
}

// TestChunkTemplateAgreesWithFullDecode: a stream's chunks, read in turn by
// one reader (which learns a template from the first content chunk and
// reads the chunks that fit it without parsing), give exactly the deltas
// and finish state the full decode gives, chunk by chunk, whether a chunk
// fits the template or not.
func TestChunkTemplateAgreesWithFullDecode(t *testing.T) {
	t.Parallel()
	const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":`
	const tail = `},"logprobs":null,"finish_reason":null}]}`
	chunks := []string{
		head + `""` + tail,
		head + `"Hello"` + tail,
		head + `" world"` + tail, // fits
		head + `" \"quoted\""` + tail,
		head + `"line\nbreak"` + tail,
		head + `" naïve 日本"` + tail, // fits: plain UTF-8
		head + "\" bad \xff\"" + tail,
		head + `" é"` + tail,
		strings.Replace(head, `"created":1`, `"created":2`, 1) + `" later"` + tail, // learns again
		strings.Replace(head, `"created":1`, `"created":2`, 1) + `" fits"` + tail,
		head[:len(head)-len(`"content":`)] + `"reasoning_content":" think"` + tail,
		head + `" x"},"logprobs":null,"finish_reason":"stop"}]}`,
		head + `" y"` + tail + ` `,
		head + `" z"` + tail[:len(tail)-1],
	}
	var fastGot, fullGot []pipeline.Delta
	gen1, gen2 := pipeline.Generation{}, pipeline.Generation{}
	fast := &streamReader{gen: &gen1, emit: func(d pipeline.Delta) error { fastGot = append(fastGot, d); return nil }}
	full := &streamReader{gen: &gen2, emit: func(d pipeline.Delta) error { fullGot = append(fullGot, d); return nil }}
	fits := 0
	for _, c := range chunks {
		fastGot, fullGot = nil, nil
		if _, ok := fast.tmpl.match([]byte(c)); ok {
			fits++
		}
		at := time.Now()
		handled, err := fast.fastChunk([]byte(c), at)
		if !handled {
			err = fast.fullChunk([]byte(c), at)
		}
		ferr := full.fullChunk([]byte(c), at)
		if (err != nil) != (ferr != nil) || !reflect.DeepEqual(strip(fastGot), strip(fullGot)) || fast.finished != full.finished {
			t.Errorf("%s: fast %v %v finished %v; full %v %v finished %v", c, strip(fastGot), err, fast.finished, strip(fullGot), ferr, full.finished)
		}
	}
	if fits != 4 {
		t.Errorf("%d chunks read from the template, want 4 (world, naïve, é, fits)", fits)
	}
}

// TestChunkTemplateNotLearntWhereAmbiguous: a content text that appears in
// the chunk twice, or only inside another string, teaches no template.
func TestChunkTemplateNotLearntWhereAmbiguous(t *testing.T) {
	t.Parallel()
	for _, c := range []string{
		`{"id":"tok","choices":[{"delta":{"content":"tok"}}]}`,
		`{"x\"content":"tok","choices":[{"delta":{"content" : "tok"}}]}`,
	} {
		var tmpl chunkTemplate
		var buf [2]chunkDelta
		deltas, _, ok := parseChunk([]byte(c), buf[:0])
		if !ok || len(deltas) != 1 {
			t.Fatalf("%s: not a plain content chunk", c)
		}
		tmpl.learn([]byte(c), deltas[0].text)
		if tmpl.prefix != nil {
			t.Errorf("%s: learnt prefix %q suffix %q", c, tmpl.prefix, tmpl.suffix)
		}
	}
}

// FuzzChunkTemplate: whenever a chunk fits a template learnt from another,
// fastjson reads it as one content delta with the same text and nothing
// else.
func FuzzChunkTemplate(f *testing.F) {
	f.Add([]byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`),
		[]byte(`{"id":"c","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":null}]}`))
	f.Add([]byte(`{"choices":[{"delta":{"content":"a","role":"assistant"}}],"usage":null}`),
		[]byte(`{"choices":[{"delta":{"content":"b\u0022","role":"assistant"}}],"usage":null}`))
	f.Add([]byte(`{"x":"a","choices":[{"delta":{"content":"a"}}]}`), []byte(`{"x":"a","choices":[{"delta":{"content":"b"}}]}`))
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var buf [2]chunkDelta
		deltas, finished, ok := parseChunk(first, buf[:0])
		if !ok || finished != "" || len(deltas) != 1 || deltas[0].reasoning {
			return
		}
		var tmpl chunkTemplate
		tmpl.learn(first, deltas[0].text)
		text, fits := tmpl.match(second)
		if !fits {
			return
		}
		got, finished, ok := parseChunk(second, buf[:0])
		if !ok || finished != "" || len(got) != 1 || got[0].reasoning || got[0].text != text {
			t.Fatalf("template of %q read %q from %q; fastjson: ok %v, %v, finish %q", first, text, second, ok, got, finished)
		}
	})
}
