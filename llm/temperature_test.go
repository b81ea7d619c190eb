package llm

import (
	"encoding/json"
	"reflect"
	"testing"

	"ragtime/pipeline"
)

// sentField is the value at path in the body d sends for req (nil: absent).
func sentField(t *testing.T, d dialect, req *pipeline.GenerateRequest, path []string) any {
	t.Helper()
	b, err := json.Marshal(d.body("m", req))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for _, k := range path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// TestTemperatureReachesEveryDialect: a request's temperature is sent in
// each provider's field for it, and none is sent when the request has none
// (the provider's default applies).
func TestTemperatureReachesEveryDialect(t *testing.T) {
	t.Parallel()
	temp := 0.25
	for _, tt := range []struct {
		d    dialect
		path []string
	}{
		{openaiDialect{}, []string{"temperature"}},
		{anthropicDialect{}, []string{"temperature"}},
		{ollamaDialect{}, []string{"options", "temperature"}},
	} {
		for _, withTemp := range []bool{true, false} {
			req := pipeline.GenerateRequest{Question: "q", MaxTokens: 8}
			if withTemp {
				req.Temperature = &temp
			}
			if v := sentField(t, tt.d, &req, tt.path); withTemp && v != 0.25 || !withTemp && v != nil {
				t.Errorf("%s, temperature set %v: sent %v", tt.d.provider(), withTemp, v)
			}
		}
	}
}

// TestStopAndSeedReachEveryDialect: a request's stop sequences and seed are
// sent in each provider's fields for them (Anthropic's Messages API takes
// no seed), and none when the request has none.
func TestStopAndSeedReachEveryDialect(t *testing.T) {
	t.Parallel()
	seed := int64(42)
	for _, tt := range []struct {
		d          dialect
		stop, seed []string // seed nil: the provider takes none
	}{
		{openaiDialect{}, []string{"stop"}, []string{"seed"}},
		{anthropicDialect{}, []string{"stop_sequences"}, nil},
		{ollamaDialect{}, []string{"options", "stop"}, []string{"options", "seed"}},
	} {
		req := pipeline.GenerateRequest{Question: "q", MaxTokens: 8, Stop: []string{"\n\n", "END"}, Seed: &seed}
		if v := sentField(t, tt.d, &req, tt.stop); !reflect.DeepEqual(v, []any{"\n\n", "END"}) {
			t.Errorf("%s: stop sent as %v", tt.d.provider(), v)
		}
		if tt.seed != nil {
			if v := sentField(t, tt.d, &req, tt.seed); v != 42.0 {
				t.Errorf("%s: seed sent as %v", tt.d.provider(), v)
			}
		}
		bare := pipeline.GenerateRequest{Question: "q", MaxTokens: 8}
		if v := sentField(t, tt.d, &bare, tt.stop); v != nil {
			t.Errorf("%s: stop sent as %v without one", tt.d.provider(), v)
		}
	}
}
