package postgres

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// jsonMarshaler is an attribute value with its own encoding.
type jsonMarshaler struct{ s string }

func (m jsonMarshaler) MarshalJSON() ([]byte, error) { return []byte(` {"s" : ` + m.s + `} `), nil }

// checkAttrsJSON fails unless appendAttrsJSON writes what json.Marshal
// writes for attrs, or fails where it fails.
func checkAttrsJSON(t *testing.T, attrs map[string]any) {
	t.Helper()
	want, wantErr := json.Marshal(attrs)
	got, err := appendAttrsJSON([]byte("prefix"), attrs)
	switch {
	case (err != nil) != (wantErr != nil):
		t.Errorf("%#v: error %v, json.Marshal's %v", attrs, err, wantErr)
	case err == nil && !bytes.Equal(got, append([]byte("prefix"), want...)):
		t.Errorf("%#v:\n got %s\nwant prefix%s", attrs, got, want)
	}
}

func TestAppendAttrsJSONMatchesMarshal(t *testing.T) {
	for _, attrs := range []map[string]any{
		{},
		{"texts": 1.0, "model": "hash-384"},
		{"reused": true, "dns_ms": 0.0, "neg": -0.0, "z": false, "nil": nil},
		{"nested": map[string]any{"list": []any{1.0, "a", nil, []any{}, map[string]any{}}}, "nilmap": map[string]any(nil), "nilslice": []any(nil)},
		{"tiny": 1e-7, "small": 0.000001, "big": 1e21, "under": 999999999999999999999.0, "max": math.MaxFloat64, "min": math.SmallestNonzeroFloat64, "e": 1.5e-300, "third": 1.0 / 3},
		{"ints": int(-7), "i64": int64(math.MaxInt64), "i32": int32(math.MinInt32), "u": uint8(200), "f32": float32(0.1)},
		{"html": "<a href=\"x\">&amp;</a>", "ctl": "tab\there\nnl\r\x00\x1f\x7f", "uni": "héllo – ✓ \u2028\u2029", "bad": "bad \xff utf-8", "bs": `back\slash`},
		{"<key>": 1.0, "ké": 2.0, "\xff": 3.0, "": 4.0},
		{"t": time.Date(2025, 3, 1, 12, 0, 0, 5, time.UTC), "bytes": []byte("raw"), "m": jsonMarshaler{`"x"`}, "strs": []string{"a", "b"}, "map": map[string]int{"b": 1, "a": 2}},
		{"nan": math.NaN()},
		{"inf": []any{1.0, math.Inf(1)}},
		{"deep": map[string]any{"x": map[string]any{"y": math.Inf(-1)}}},
		{"fn": func() {}},
		{"ch": make(chan int)},
		{"m": jsonMarshaler{`{`}}, // invalid JSON from MarshalJSON
	} {
		checkAttrsJSON(t, attrs)
	}
	if _, err := appendAttrsJSON(nil, map[string]any{"p": panicky{}}); err == nil {
		t.Error("a panicking MarshalJSON: no error")
	}
}

type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("boom") }

func FuzzAppendAttrsJSON(f *testing.F) {
	f.Add("model", "hash-384", 3.217, int64(8), true)
	f.Add("<k>", "a\x00b\u2028\xff", 1e-7, int64(-1), false)
	f.Add("", "", 1e21, int64(math.MinInt64), true)
	f.Fuzz(func(t *testing.T, k, s string, x float64, n int64, b bool) {
		checkAttrsJSON(t, map[string]any{
			k:      s,
			s:      x,
			"n":    n,
			"b":    b,
			"nest": map[string]any{k: []any{s, x, n, b, nil}, "i": int(n)},
		})
	})
}
