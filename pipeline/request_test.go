package pipeline

import "testing"

func TestDefaultsRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d          Defaults
		topK, want int
	}{
		{Defaults{}, 1, 1}, {Defaults{}, 16, DefaultRerankTopN},
		{Defaults{RerankTopN: 16}, 16, 16}, {Defaults{RerankTopN: 16}, 4, 4},
		{Defaults{RerankOff: true}, 8, 0},
	} {
		if got := tc.d.RerankTopNFor(tc.topK); got != tc.want {
			t.Errorf("%+v.RerankTopNFor(%d) = %d, want %d", tc.d, tc.topK, got, tc.want)
		}
	}
	r := Request{Question: "q", TopK: Unset, RerankTopN: Unset, MaxTokens: Unset}
	if err := r.NormalizeWith(0, Defaults{TopK: 12, RerankTopN: 6}); err != nil || r.TopK != 12 || r.RerankTopN != 6 {
		t.Errorf("NormalizeWith serve's defaults: top_k %d rerank %d (%v), want 12 and 6", r.TopK, r.RerankTopN, err)
	}
	r = Request{Question: "q", TopK: 2, RerankTopN: Unset, MaxTokens: Unset}
	if err := r.NormalizeWith(0, Defaults{TopK: 12, RerankTopN: 6}); err != nil || r.TopK != 2 || r.RerankTopN != 2 {
		t.Errorf("an ask's own top_k caps the default rerank: top_k %d rerank %d (%v)", r.TopK, r.RerankTopN, err)
	}
}
