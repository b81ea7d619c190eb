package postgres

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestAppendJSONBIsEncodingJSONsValue: the attrs the recorder frames
// itself must be the jsonb value encoding/json's text would be (key order
// aside, which jsonb does not keep), and what it cannot frame it must say.
func TestAppendJSONBIsEncodingJSONsValue(t *testing.T) {
	t.Parallel()
	for _, attrs := range []map[string]any{
		{},
		{"hits": 8.0, "k": 8, "store": "embedded", "reused": true, "big": int64(1) << 60},
		{"tiny": 1e-7, "huge": 1e21, "neg": -0.5, "zero": 0.0},
		{"html": "<a href='x'>&</a>", "quote": `"\`, "ctl": "a\x00b\nc\t", "bad utf8": "\xff", "ls": "\u2028\u2029", "é": "ü"},
		{"nested": map[string]any{"list": []any{1.0, "a", nil, true, []any{}, map[string]any{}}}, "null": nil},
		{"nil map": map[string]any(nil), "nil list": []any(nil)},
	} {
		got, ok := appendJSONB([]byte("prefix"), attrs)
		if !ok {
			t.Errorf("appendJSONB(%v) refused it", attrs)
			continue
		}
		if string(got[:6]) != "prefix" {
			t.Errorf("appendJSONB overwrote what came before: %q", got)
		}
		want, err := json.Marshal(attrs)
		if err != nil {
			t.Fatal(err)
		}
		var gotValue, wantValue any
		if err := json.Unmarshal(got[6:], &gotValue); err != nil {
			t.Errorf("appendJSONB(%v) = %s, not JSON: %v", attrs, got[6:], err)
			continue
		}
		if err := json.Unmarshal(want, &wantValue); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotValue, wantValue) {
			t.Errorf("appendJSONB = %s, encoding/json = %s", got[6:], want)
		}
	}
	for _, v := range []any{
		map[string]any{"struct": struct{ A int }{1}},
		map[string]any{"nan": []any{0.0, nanValue()}},
		map[string]any{"typed map": map[string]int{"a": 1}},
	} {
		if got, ok := appendJSONB(nil, v); ok {
			t.Errorf("appendJSONB(%v) = %s, want it refused (encoding/json's to encode or refuse)", v, got)
		}
	}
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}
