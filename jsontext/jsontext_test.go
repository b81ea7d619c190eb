package jsontext

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestAppendStringMatchesEncodingJSON: the hand-framed token event must
// carry exactly what encoding/json (HTML escaping off) would have written.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	cases := []string{"", "plain", `quote " and \ backslash`, "new\nline\r\ttab\b\f", "\x00\x01\x1f\x7f",
		"<html> & 'apos'", "héllo wörld ✓ 日本語 🚀", "bad \xff utf8 \xc3", "js \u2028 \u2029 separators",
		strings.Repeat("long token ", 200)}
	for i := range 256 {
		cases = append(cases, string([]byte{byte(i), 'a', byte(255 - i)}))
	}
	for _, c := range cases {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c); err != nil {
			t.Fatal(err)
		}
		got := AppendString(nil, c)
		if string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("AppendString(%q) = %s, want %s", c, got, want.String())
		}
	}
}

func BenchmarkAppendString(b *testing.B) {
	var buf []byte
	for b.Loop() {
		buf = AppendString(buf[:0], "prefill ")
	}
}
