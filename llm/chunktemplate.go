package llm

import (
	"bytes"
	"unicode/utf8"
)

// chunkTemplate reads the content chunks of one stream without parsing
// them: a server sends one chunk per token, and all of a stream's chunks
// are the same bytes (id, object, created, model, the choice's other
// fields) around the token's text. Learnt from a chunk fastjson read, the
// template is the bytes before the content's text (prefix, ending with its
// opening quote) and after its closing quote (suffix); a later chunk that
// has them byte for byte, with a text between them that needs no escape
// sequence, is the same JSON with another text, so that text is its delta.
// Anything else (an escaped or non-UTF-8 text, a changed field, another
// shape) goes to fastjson, which may learn a new template; a stream whose
// chunks keep changing (a per-chunk nonce, as OpenAI's obfuscation field)
// stops learning after a few.
//
// The prefix and suffix are proved, not guessed: a template is kept only
// if fastjson, given the prefix, a probe text and the suffix, reads one
// content delta with the probe's text and nothing else, for two different
// probes; the text between them is then the delta's content and nothing
// else depends on it.
type chunkTemplate struct {
	prefix, suffix []byte
	learnt         int // templates learnt in this stream
}

// maxTemplates bounds the templates one stream learns (each costs three
// parses of a chunk).
const maxTemplates = 3

// match returns the text of a chunk that fits the template.
func (t *chunkTemplate) match(data []byte) (string, bool) {
	if t.prefix == nil || len(data) < len(t.prefix)+1+len(t.suffix) || !bytes.HasPrefix(data, t.prefix) {
		return "", false
	}
	body := data[len(t.prefix):]
	end := plainStringEnd(body)
	if end < 0 || !bytes.Equal(body[end+1:], t.suffix) || !utf8.Valid(body[:end]) {
		return "", false
	}
	return string(body[:end]), true
}

// plainStringEnd is the index of the quote that ends a JSON string body
// holding no escape sequence and no control character, or -1.
func plainStringEnd(b []byte) int {
	for i, c := range b {
		switch {
		case c == '"':
			return i
		case c == '\\' || c < 0x20:
			return -1
		}
	}
	return -1
}

// learn takes data, a chunk fastjson read as one content delta of text (and
// no finish reason), as the template when text needs no escaping and the
// probes confirm where it is.
func (t *chunkTemplate) learn(data []byte, text string) {
	if t.learnt >= maxTemplates || text == "" || plainStringEnd([]byte(text+`"`)) != len(text) {
		return
	}
	quoted := make([]byte, 0, len(text)+2)
	quoted = append(append(append(quoted, '"'), text...), '"')
	i := bytes.Index(data, quoted)
	if i < 0 || bytes.Contains(data[i+1:], quoted) {
		return // not there, or more than once: which one is the content is not for a byte search to say
	}
	prefix, suffix := data[:i+1], data[i+1+len(text)+1:]
	for _, probe := range []string{"a", "bc"} {
		chunk := make([]byte, 0, len(prefix)+len(probe)+1+len(suffix))
		chunk = append(append(append(append(chunk, prefix...), probe...), '"'), suffix...)
		var buf [2]chunkDelta
		deltas, finished, ok := parseChunk(chunk, buf[:0])
		if !ok || finished != "" || len(deltas) != 1 || deltas[0].reasoning || deltas[0].text != probe {
			return
		}
	}
	t.prefix, t.suffix = bytes.Clone(prefix), bytes.Clone(suffix)
	t.learnt++
}
