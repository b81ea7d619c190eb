package llm

import (
	"bytes"
	"encoding/json"
	"testing"

	"ragtime/pipeline"
)

// TestEncodeBodyIsMarshal checks the pooled encoding writes the bytes
// json.Marshal would, HTML escapes included, with no trailing newline,
// also into a buffer left over from a longer body.
func TestEncodeBodyIsMarshal(t *testing.T) {
	temp := 0.5
	for _, d := range []dialect{openaiDialect{}, anthropicDialect{}, ollamaDialect{}} {
		for _, q := range []string{"a much longer question <b>&</b> \u2028 é, to leave a long buffer behind", "short"} {
			req := &pipeline.GenerateRequest{Question: q, MaxTokens: 8, Temperature: &temp,
				Messages: []pipeline.Message{{Role: "system", Content: "s"}, {Role: "user", Content: q}}}
			want, err := json.Marshal(d.body("m", req))
			if err != nil {
				t.Fatal(err)
			}
			rb, err := encodeBody(d.body("m", req))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rb.b, want) {
				t.Errorf("%s: encodeBody = %s, want %s", d.provider(), rb.b, want)
			}
			rb.reads = 1
			rb.release() // no trace: not pooled, and not to be read again
			if rb.b != nil || rb.buf != nil {
				t.Errorf("%s: release kept the body", d.provider())
			}
		}
	}
}
