package pipeline

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// reflected is what encoding/json writes for v through reflection alone.
func reflected(t *testing.T, v any, escapeHTML bool) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// TestSpanJSONMatchesReflection: a span framed by hand is byte for byte
// what encoding/json's reflection writes, alone and inside a done event,
// with HTML escaping off and on; spans it cannot frame go to reflection,
// and one that JSON cannot hold is still an error.
func TestSpanJSONMatchesReflection(t *testing.T) {
	t.Parallel()
	spans := []Span{
		{Name: "queue", Seq: 0, StartMs: 0, DurationMs: 0, Attrs: map[string]any{"limit": 0}},
		{Name: "accept", Seq: 0},
		{Name: "embed", Seq: 2, StartMs: 0.211, DurationMs: 12.5, Attrs: map[string]any{"embedder": "openai:<m&x>", "dim": 512, "reused": true, "dns_ms": 0.0, "connect_ms": 1e-7, "tls_ms": 3e21}},
		{Name: "search", Seq: 3, StartMs: 1234567.891, DurationMs: 0.000001, Attrs: map[string]any{"k": 4, "hits": int64(4), "store": "embedded", "exact": false, "ef": 64}},
		{Name: "llm_prefill", Seq: 7, StartMs: -0.5, DurationMs: 150.25, Attrs: map[string]any{"status": 200, "server_prefill_ms": 98.765432, "z\u2028key": "v\"al\\ue\n"}},
		{Name: "llm_decode", Seq: 8, Attrs: map[string]any{}},
		{Name: "x <list>", Attrs: map[string]any{"list": []string{"a<b"}, "n": 1}},
		{Name: "x", Attrs: map[string]any{"nested": map[string]any{"a": nil}}},
	}
	for i, sp := range spans {
		_, framed := sp.AppendJSON(nil)
		if framed != (i < 6) {
			t.Errorf("%s: framed by hand %v", sp.Name, framed)
		}
		for _, esc := range []bool{false, true} {
			if got, want := reflected(t, sp, esc), reflected(t, spanFields(sp), esc); got != want {
				t.Errorf("%s (HTML escaping %v):\n got %s\nwant %s", sp.Name, esc, got, want)
			}
		}
	}
	type doneFields struct {
		QueryID string `json:"query_id"`
		Model   string `json:"model"`
		Figures
		Stages []spanFields `json:"stages"`
	}
	ttft := 43.5
	done := DoneEvent{QueryID: "q", Model: "m", Figures: Figures{TTFTMs: &ttft}, Stages: spans}
	mirror := doneFields{QueryID: "q", Model: "m", Figures: done.Figures}
	for _, sp := range spans {
		mirror.Stages = append(mirror.Stages, spanFields(sp))
	}
	if got, want := reflected(t, done, false), reflected(t, mirror, false); got != want {
		t.Errorf("done event:\n got %s\nwant %s", got, want)
	}
	for _, sp := range []Span{{Name: "x", StartMs: math.NaN()}, {Name: "x", Attrs: map[string]any{"f": math.Inf(1)}}} {
		if _, err := json.Marshal(sp); err == nil {
			t.Errorf("%+v: encoded, want an error", sp)
		}
	}
}
