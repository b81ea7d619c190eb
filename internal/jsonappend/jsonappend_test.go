package jsonappend

import (
	"bytes"
	"encoding/json"
	"math"
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

// TestAppendObjectMatchesEncodingJSON: stage attributes framed by hand are
// byte for byte what encoding/json (HTML escaping off) writes for the map,
// keys sorted, beyond the keys' stack array too; other value types are
// refused, not guessed.
func TestAppendObjectMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	many := map[string]any{}
	for i := range 40 {
		many[strings.Repeat("k", 40-i)+"é"] = i
	}
	cases := []map[string]any{nil, {}, {"limit": 0},
		{"embedder": "openai:<m&x>", "dim": 512, "reused": true, "dns_ms": 0.0, "connect_ms": 1e-7, "tls_ms": 3e21, "hits": int64(-4)},
		{"z\u2028key": "v\"al\\ue\n", "Z": false, "a b": 1.5, "": ""}, many}
	for _, m := range cases {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		got, ok := AppendObject([]byte("prefix"), m)
		if !ok || string(got) != "prefix"+strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("AppendObject(%v) = %s, %v; want %s", m, got, ok, want.String())
		}
	}
	for _, m := range []map[string]any{{"list": []string{"a"}}, {"n": int32(1)}, {"ok": 1, "f": math.NaN()}, {"m": map[string]any{}}} {
		if _, ok := AppendObject(nil, m); ok {
			t.Errorf("AppendObject(%v) framed a value it does not know", m)
		}
	}
}

func BenchmarkAppendObject(b *testing.B) {
	attrs := map[string]any{"connect_ms": 0.0, "dns_ms": 0.0, "reused": true, "tls_ms": 0.0, "status": 200}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendObject(buf[:0], attrs)
	}
}
