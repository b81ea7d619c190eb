package pipeline

import (
	"bytes"
	"encoding/json"
	"strconv"

	"ragtime/jsontext"
)

// AppendJSON appends sp as encoding/json (HTML escaping off) writes it,
// without reflection: a span is encoded nine times per ask (its stage
// event and the done event's stages). ok is false when a figure is NaN or
// infinite or an attribute has a type jsontext does not write; encoding/json
// then has the last word (MarshalJSON).
func (sp Span) AppendJSON(b []byte) (out []byte, ok bool) {
	b = append(b, `{"name":`...)
	b = jsontext.AppendString(b, sp.Name)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(sp.Seq), 10)
	b = append(b, `,"start_ms":`...)
	if b, ok = jsontext.AppendFloat(b, sp.StartMs); !ok {
		return b, false
	}
	b = append(b, `,"duration_ms":`...)
	if b, ok = jsontext.AppendFloat(b, sp.DurationMs); !ok {
		return b, false
	}
	if len(sp.Attrs) > 0 {
		b = append(b, `,"attrs":`...)
		if b, ok = jsontext.AppendObject(b, sp.Attrs); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// MarshalJSON writes sp through AppendJSON, and through encoding/json's
// reflection (the same bytes) only for a span AppendJSON does not frame.
func (sp Span) MarshalJSON() ([]byte, error) {
	if b, ok := sp.AppendJSON(make([]byte, 0, 160)); ok {
		return b, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the caller's encoder escapes, if it does
	if err := enc.Encode(spanFields(sp)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// spanFields is Span without its methods: encoding/json's view of it.
type spanFields Span
