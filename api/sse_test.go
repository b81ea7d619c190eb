package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"ragtime/pipeline"
)

// TestAppendSpanMatchesEncodingJSON: a hand-framed stage event carries
// exactly what encoding/json (HTML escaping off) writes, and spans it
// cannot frame are left to encoding/json.
func TestAppendSpanMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	spans := []pipeline.Span{
		{Name: "queue", Seq: 0, StartMs: 0, DurationMs: 0, Attrs: map[string]any{"limit": 0}},
		{Name: "accept", Seq: 0},
		{Name: "embed", Seq: 2, StartMs: 0.211, DurationMs: 12.5, Attrs: map[string]any{"embedder": "openai:<m&x>", "dim": 512, "reused": true, "dns_ms": 0.0, "connect_ms": 1e-7, "tls_ms": 3e21}},
		{Name: "search", Seq: 3, StartMs: 1234567.891, DurationMs: 0.000001, Attrs: map[string]any{"k": 4, "hits": int64(4), "store": "embedded", "exact": false, "ef": 64}},
		{Name: "llm_prefill", Seq: 7, StartMs: -0.5, DurationMs: 150.25, Attrs: map[string]any{"status": 200, "server_prefill_ms": 98.765432, "z\u2028key": "v\"al\\ue\n"}},
		{Name: "llm_decode", Seq: 8, Attrs: map[string]any{}},
	}
	for _, sp := range spans {
		got, ok := appendSpan(nil, sp)
		if !ok {
			t.Errorf("%s: not framed", sp.Name)
			continue
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(sp); err != nil {
			t.Fatal(err)
		}
		if string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("%s:\n got %s\nwant %s", sp.Name, got, want.String())
		}
	}
	for _, sp := range []pipeline.Span{
		{Name: "x", Attrs: map[string]any{"list": []string{"a"}}},
		{Name: "x", StartMs: math.NaN()},
		{Name: "x", Attrs: map[string]any{"f": math.Inf(1)}},
	} {
		if _, ok := appendSpan(nil, sp); ok {
			t.Errorf("%+v was framed by hand", sp)
		}
	}
}
