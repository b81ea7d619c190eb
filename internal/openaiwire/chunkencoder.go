package openaiwire

import (
	"encoding/json"
	"strconv"

	"ragtime/internal/jsonappend"
)

// ChunkEncoder writes one answer's chat.completion.chunk events as
// Server-Sent Events (`data: {…}` and a blank line), without reflection or
// allocation: the per-token path of the simulator and of ragtime's
// /v1/chat/completions. A chunk is byte for byte what encoding/json (HTML
// escaping off) writes for the same Chunk, except that a stream whose
// client asked for usage carries "usage":null on every chunk before the
// last, as OpenAI's does.
type ChunkEncoder struct {
	ID, Model string
	Created   int64
	// pre is every chunk's opening, `data: {"id":…,"model":…`, encoded once.
	pre []byte
	// end closes every chunk but the usage chunk: `}` and the blank line,
	// after `,"usage":null` when the client asked for usage.
	end string
}

// NewChunkEncoder returns the encoder of one answer's chunks.
func NewChunkEncoder(id, model string, created int64, includeUsage bool) ChunkEncoder {
	e := ChunkEncoder{ID: id, Model: model, Created: created, end: "}\n\n"}
	if includeUsage {
		e.end = `,"usage":null}` + "\n\n"
	}
	b := append([]byte(nil), `data: {"id":`...)
	b = jsonappend.AppendString(b, id)
	b = append(b, `,"object":"`+ObjectChunk+`","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	e.pre = jsonappend.AppendString(b, model)
	return e
}

// Head appends a chunk's opening: its id, object, created and model.
func (e *ChunkEncoder) Head(b []byte) []byte { return append(b, e.pre...) }

// Role appends the first chunk: the assistant role and empty content.
func (e *ChunkEncoder) Role(b []byte) []byte {
	b = e.Head(b)
	b = append(b, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null,"logprobs":null}]`...)
	return append(b, e.end...)
}

// Delta appends one token's chunk: prefix and text (prefix, a separator
// the caller would otherwise concatenate, may be empty) in the delta field
// named field: "content", or a reasoning field ("reasoning_content").
// field is one of a few fixed names and is not escaped.
func (e *ChunkEncoder) Delta(b []byte, field, prefix, text string) []byte {
	b = e.Head(b)
	b = append(b, `,"choices":[{"index":0,"delta":{"`...)
	b = append(b, field...)
	b = append(b, `":"`...)
	b = jsonappend.AppendStringBody(b, prefix)
	b = jsonappend.AppendStringBody(b, text)
	b = append(b, `"},"finish_reason":null,"logprobs":null}]`...)
	return append(b, e.end...)
}

// Finish appends the chunk that ends the choice with reason.
func (e *ChunkEncoder) Finish(b []byte, reason string) []byte {
	b = e.Head(b)
	b = append(b, `,"choices":[{"index":0,"delta":{},"finish_reason":`...)
	b = jsonappend.AppendString(b, reason)
	b = append(b, `,"logprobs":null}]`...)
	return append(b, e.end...)
}

// Usage appends the chunk after the final one: no choices, the usage (when
// u is not nil) and, in the order given, the extras' objects (a server's
// timings; a key whose value does not encode is left out).
func (e *ChunkEncoder) Usage(b []byte, u *Usage, extras ...Extra) []byte {
	b = e.Head(b)
	b = append(b, `,"choices":[]`...)
	if u != nil {
		b = append(b, `,"usage":`...)
		j, _ := json.Marshal(u) // a struct of ints cannot fail to encode
		b = append(b, j...)
	}
	for _, x := range extras {
		j, err := json.Marshal(x.Value)
		if err != nil {
			continue
		}
		b = append(b, ',')
		b = jsonappend.AppendString(b, x.Key)
		b = append(b, ':')
		b = append(b, j...)
	}
	return append(b, "}\n\n"...)
}

// Extra is a top-level key of a usage chunk beside OpenAI's own.
type Extra struct {
	Key   string
	Value any
}
