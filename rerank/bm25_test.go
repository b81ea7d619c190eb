package rerank

import (
	"context"
	"testing"

	"ragtime/pipeline"
)

func hit(id, text string, score float64) pipeline.Hit {
	return pipeline.Hit{Chunk: pipeline.Chunk{ID: id, Text: text}, Score: score}
}

func TestBM25Rerank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		question string
		hits     []pipeline.Hit
		topN     int
		want     []string
	}{
		{
			name:     "relevant chunk moves up",
			question: "How is prefill time measured?",
			hits: []pipeline.Hit{
				hit("a", "The cat sat on the mat.", 0.9),
				hit("b", "Decode emits one token at a time.", 0.8),
				hit("c", "Prefill time is measured from request written to first token.", 0.7),
			},
			topN: 2,
			want: []string{"c", "b"},
		},
		{
			name:     "ties keep search order",
			question: "unrelated words entirely",
			hits:     []pipeline.Hit{hit("a", "alpha", 0.9), hit("b", "beta", 0.8), hit("c", "gamma", 0.7)},
			topN:     3,
			want:     []string{"a", "b", "c"},
		},
		{
			name:     "topN larger than candidates",
			question: "beta",
			hits:     []pipeline.Hit{hit("a", "alpha", 0.9), hit("b", "beta", 0.8)},
			topN:     5,
			want:     []string{"b", "a"},
		},
		{name: "no candidates", question: "x", hits: nil, topN: 3, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NewBM25().Rerank(context.Background(), tt.question, tt.hits, tt.topN)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d hits, want %d", len(got), len(tt.want))
			}
			for i, h := range got {
				if h.ID != tt.want[i] {
					t.Errorf("rank %d = %s, want %s", i+1, h.ID, tt.want[i])
				}
				if h.RerankScore == nil {
					t.Errorf("rank %d has no rerank score", i+1)
				}
			}
			for i, h := range got {
				for _, orig := range tt.hits {
					if orig.ID == h.ID && orig.Score != h.Score && i >= 0 {
						t.Errorf("search score of %s changed", h.ID)
					}
				}
			}
		})
	}
}

func TestBM25RerankCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewBM25().Rerank(ctx, "q", []pipeline.Hit{hit("a", "q", 1)}, 1); err == nil {
		t.Fatal("want an error for a cancelled context")
	}
}
