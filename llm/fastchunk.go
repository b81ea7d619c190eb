package llm

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"ragtime/pipeline"
)

// The content chunk of an OpenAI-compatible stream is the one message per
// token, and decoding it into streamChunk through encoding/json's
// reflection was the largest share of ragtime's CPU per ask after the
// socket writes. fastChunk reads the common shape with valyala/fastjson (a
// validating parser without reflection, reused per stream) and hands
// everything else to the full decode, so the two paths cannot disagree:
// anything it is not sure of — usage, timings, an error, a non-string
// delta, a key that differs from a known one only in case, a repeated key,
// text that is not valid UTF-8 — is not its to handle.

// chunkKeys are the top-level keys streamChunk reads besides choices; the
// fast path takes a chunk only when each is absent or null.
var chunkKeys = []string{"usage", "error", "timings", "metrics", "x_groq"}

// chunkParsers parse the content chunks of every stream. A parser keeps the
// values of the last chunk it parsed (1-2 KB), which a stream's own parser
// held between its tokens for as long as the stream stayed open.
var chunkParsers fastjson.ParserPool

// fastChunk delivers the deltas of a plain content chunk. handled is false
// when the chunk must go through the full decode instead (nothing was
// delivered then). A chunk that differs from the stream's template only in
// its content's text is read from the template (chunkTemplate); any other
// goes through fastjson.
func (s *streamReader) fastChunk(data []byte, at time.Time) (handled bool, err error) {
	if text, ok := s.tmpl.match(data); ok {
		return true, deliverer{s.gen, s.emit}.deliver(pipeline.Delta{Text: text, At: at})
	}
	var buf [2]chunkDelta // the common chunk: one choice, one delta
	deltas, finished, ok := parseChunk(data, buf[:0])
	if !ok {
		return false, nil
	}
	if finished != "" {
		s.finished = true
		s.gen.FinishReason = finished
	}
	if len(deltas) == 1 && !deltas[0].reasoning && finished == "" {
		s.tmpl.learn(data, deltas[0].text)
	}
	d := deliverer{s.gen, s.emit}
	for _, dl := range deltas {
		if err := d.deliver(pipeline.Delta{Text: dl.text, Reasoning: dl.reasoning, At: at}); err != nil {
			return true, err
		}
	}
	return true, nil
}

// chunkDelta is a delta of a plain content chunk.
type chunkDelta struct {
	text      string
	reasoning bool
}

// parseChunk reads a plain content chunk with fastjson: its deltas,
// appended to deltas, and its finish reason; ok is false for any chunk that
// is not its to read.
func parseChunk(data []byte, deltas []chunkDelta) (_ []chunkDelta, finished string, ok bool) {
	p := chunkParsers.Get()
	defer chunkParsers.Put(p) // the deltas' texts are copies
	v, perr := p.ParseBytes(data)
	if perr != nil {
		return nil, "", false // the full decode words the error
	}
	obj, oerr := v.Object()
	if oerr != nil {
		return nil, "", false
	}
	var choices *fastjson.Value
	ok = true
	seen := 0
	obj.Visit(func(key []byte, val *fastjson.Value) {
		k := string(key)
		switch {
		case !ok:
		case k == "choices":
			seen++
			choices = val
		default:
			for _, known := range chunkKeys {
				if foldsTo(k, known) && (k != known || val.Type() != fastjson.TypeNull) {
					ok = false
				}
			}
			if foldsTo(k, "choices") {
				ok = false
			}
		}
	})
	if !ok || seen != 1 || choices.Type() != fastjson.TypeArray {
		return nil, "", false
	}
	for _, ch := range choices.GetArray() {
		fields, err := ch.Object()
		if err != nil {
			return nil, "", false
		}
		var content, reasoningContent, reasoning string
		ok := true
		fields.Visit(func(key []byte, val *fastjson.Value) {
			switch k := string(key); {
			case !ok:
			case k == "delta":
				ok = readDelta(val, &content, &reasoningContent, &reasoning)
			case k == "finish_reason":
				switch val.Type() {
				case fastjson.TypeNull:
				case fastjson.TypeString:
					if b := val.GetStringBytes(); len(b) > 0 {
						finished = finishReason(b)
					}
				default:
					ok = false
				}
			case foldsTo(k, "delta") || foldsTo(k, "finish_reason"):
				ok = false
			}
		})
		if !ok {
			return nil, "", false
		}
		if r := cmpOr(reasoningContent, reasoning); r != "" {
			deltas = append(deltas, chunkDelta{r, true})
		}
		if content != "" {
			deltas = append(deltas, chunkDelta{content, false})
		}
	}
	return deltas, finished, true
}

// readDelta reads a choice's delta: an object whose content,
// reasoning_content and reasoning are strings or null. ok is false for
// anything else.
func readDelta(v *fastjson.Value, content, reasoningContent, reasoning *string) bool {
	fields, err := v.Object()
	if err != nil {
		return false
	}
	ok := true
	var seen uint8 // a bit per field: a repeated key is the full decode's
	fields.Visit(func(key []byte, val *fastjson.Value) {
		var dst *string
		var bit uint8
		switch k := string(key); {
		case !ok:
			return
		case k == "content":
			dst, bit = content, 1
		case k == "reasoning_content":
			dst, bit = reasoningContent, 2
		case k == "reasoning":
			dst, bit = reasoning, 4
		case foldsTo(k, "content") || foldsTo(k, "reasoning_content") || foldsTo(k, "reasoning"):
			ok = false
			return
		default:
			return
		}
		if seen&bit != 0 {
			ok = false
			return
		}
		seen |= bit
		switch val.Type() {
		case fastjson.TypeNull:
		case fastjson.TypeString:
			b := val.GetStringBytes()
			if !utf8.Valid(b) {
				ok = false
				return
			}
			*dst = string(b)
		default:
			ok = false
		}
	})
	return ok
}

// foldsTo is strings.EqualFold(k, known) for a known key in lower-case
// ASCII, answered from the first byte for most keys (the key of another
// field): an ASCII byte folds to a lower-case letter only if it is that
// letter or its capital. A non-ASCII first byte (a key that might fold
// through Unicode, as K to k) goes to EqualFold. Chunks have a dozen keys
// checked against several known ones each, per token.
func foldsTo(k, known string) bool {
	if len(k) > 0 && k[0] < utf8.RuneSelf && k[0]|0x20 != known[0] {
		return false
	}
	return strings.EqualFold(k, known)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// finishReason is b as a string, without an allocation for the reasons
// OpenAI-compatible servers send (the last chunk of every answer has one).
func finishReason(b []byte) string {
	switch string(b) {
	case "stop":
		return "stop"
	case "length":
		return "length"
	case "tool_calls":
		return "tool_calls"
	case "content_filter":
		return "content_filter"
	case "eos":
		return "eos"
	}
	return string(b)
}
