package eval

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestMetricsByHand(t *testing.T) {
	t.Parallel()
	// c is relevant at rank 3; x is relevant and never retrieved.
	ranked, relevant := []string{"a", "b", "c", "d"}, []string{"c", "x"}
	cases := []struct {
		name      string
		got, want float64
	}{
		{"hit@1", HitAt(ranked, relevant, 1), 0},
		{"hit@2", HitAt(ranked, relevant, 2), 0},
		{"hit@3", HitAt(ranked, relevant, 3), 1},
		{"hit@10 beyond the list", HitAt(ranked, relevant, 10), 1},
		{"rr@10", ReciprocalRankAt(ranked, relevant, 10), 1.0 / 3},
		{"rr@2", ReciprocalRankAt(ranked, relevant, 2), 0},
		// DCG = 1/log2(4) = 0.5; ideal (2 relevant) = 1 + 1/log2(3).
		{"ndcg@10", NDCGAt(ranked, relevant, 10), 0.5 / (1 + 1/math.Log2(3))},
		// At k=1 the ideal holds one relevant id: IDCG = 1, DCG = 0.
		{"ndcg@1", NDCGAt(ranked, relevant, 1), 0},
		{"ndcg perfect", NDCGAt([]string{"c", "x", "a"}, relevant, 10), 1},
		// Both relevant at ranks 2 and 3: (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3)).
		{"ndcg two", NDCGAt([]string{"a", "x", "c"}, relevant, 10), (1/math.Log2(3) + 0.5) / (1 + 1/math.Log2(3))},
		// A repeated id earns its gain once.
		{"ndcg repeat", NDCGAt([]string{"c", "c"}, []string{"c"}, 10), 1},
		{"no labels", NDCGAt(ranked, nil, 10), 0},
		{"empty ranking", ReciprocalRankAt(nil, relevant, 10), 0},
		{"p50 even", Percentile([]float64{1, 2, 3, 4}, 0.5), 2.5},
		{"p95", Percentile([]float64{10, 20}, 0.95), 19.5},
	}
	for _, c := range cases {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("the percentile of nothing is not NaN")
	}
}

func TestRankedCollapsesDocuments(t *testing.T) {
	t.Parallel()
	results := []Result{{ChunkID: "p1#0", DocID: "p1"}, {ChunkID: "p1#3", DocID: "p1"}, {ChunkID: "p2#1", DocID: "p2"}, {ChunkID: "p1#1", DocID: "p1"}, {ChunkID: "p3#0", DocID: "p3"}}
	ranked, rel := Ranked(Question{Relevant: []string{"p3"}}, results)
	if !slices.Equal(ranked, []string{"p1", "p2", "p3"}) || !slices.Equal(rel, []string{"p3"}) {
		t.Errorf("by documents: %v %v", ranked, rel)
	}
	// p3 is the third document though the fifth result.
	if rr := ReciprocalRankAt(ranked, rel, 10); rr != 1.0/3 {
		t.Errorf("rr = %v, want 1/3", rr)
	}
	ranked, rel = Ranked(Question{Relevant: []string{"p3"}, RelevantChunks: []string{"p1#1"}}, results)
	if !slices.Equal(ranked, []string{"p1#0", "p1#3", "p2#1", "p1#1", "p3#0"}) || !slices.Equal(rel, []string{"p1#1"}) {
		t.Errorf("by chunks: %v %v", ranked, rel)
	}
}

// The figures of one question whose only relevant page comes second.
func ExampleNDCGAt() {
	ranked := []string{"sql-createindex.html", "indexes-partial.html", "indexes-types.html"}
	relevant := []string{"indexes-partial.html"}
	fmt.Printf("hit@1 %.0f hit@5 %.0f RR %.2f nDCG@10 %.4f\n",
		HitAt(ranked, relevant, 1), HitAt(ranked, relevant, 5), ReciprocalRankAt(ranked, relevant, 10), NDCGAt(ranked, relevant, 10))
	// Output: hit@1 0 hit@5 1 RR 0.50 nDCG@10 0.6309
}
