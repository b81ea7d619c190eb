package llm

import (
	"encoding/json"
	"testing"

	"ragtime/pipeline"
)

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
			b, err := json.Marshal(tt.d.body("m", &req))
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			for _, k := range tt.path {
				m, _ := v.(map[string]any)
				v = m[k]
			}
			if withTemp && v != 0.25 || !withTemp && v != nil {
				t.Errorf("%s, temperature set %v: %s", tt.d.provider(), withTemp, b)
			}
		}
	}
}
