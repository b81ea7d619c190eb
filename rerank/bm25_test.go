package rerank

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"ragtime/lexical"
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
			got, err := NewBM25(nil).Rerank(context.Background(), tt.question, tt.hits, tt.topN)
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
	if _, err := NewBM25(nil).Rerank(ctx, "q", []pipeline.Hit{hit("a", "q", 1)}, 1); err == nil {
		t.Fatal("want an error for a cancelled context")
	}
}

// With the corpus's statistics a candidate's score does not depend on the
// pool: the candidates of a shallow pool keep their scores and order in a
// deeper one. (With document frequencies over the candidates, a term the
// deep pool's extra candidates share lost its weight and the order moved.)
func TestBM25DeeperPoolKeepsScores(t *testing.T) {
	t.Parallel()
	x := lexical.NewIndex()
	var pool []pipeline.Hit
	texts := []string{"eviction of cache entries", "the cache warms at start", "entries expire after eviction"}
	for i := range 60 {
		texts = append(texts, fmt.Sprintf("cache layer %d keeps cache entries for cache readers", i))
	}
	for i, s := range texts {
		x.Add(lexical.Analyse("", s), int32(i))
		pool = append(pool, hit(fmt.Sprint(i), s, 1))
	}
	r := NewBM25(x)
	scores := func(n int) map[string]float64 {
		got, err := r.Rerank(context.Background(), "cache eviction", slices.Clone(pool[:n]), n)
		if err != nil {
			t.Fatal(err)
		}
		m := make(map[string]float64, n)
		for _, h := range got {
			m[h.ID] = *h.RerankScore
		}
		if got[0].ID != "0" {
			t.Errorf("pool of %d: first is %s (%q), want 0", n, got[0].ID, got[0].Text)
		}
		return m
	}
	shallow, deep := scores(3), scores(len(pool))
	for id, s := range shallow {
		if deep[id] != s {
			t.Errorf("candidate %s scored %v among 3, %v among %d", id, s, deep[id], len(pool))
		}
	}
}

// scorerFunc is a CorpusScorer from a function (a Qdrant store's stand-in).
type scorerFunc func(ctx context.Context, question string, hits []pipeline.Hit) ([]float64, error)

func (f scorerFunc) ScoreLexical(ctx context.Context, question string, hits []pipeline.Hit) ([]float64, error) {
	return f(ctx, question, hits)
}

// TestBM25RemoteRerank: with a CorpusScorer the reranker ranks by its
// scores (ties keeping the search order), keeps topN, and a scorer's
// failure is the rerank's, saying what it was doing.
func TestBM25RemoteRerank(t *testing.T) {
	t.Parallel()
	var asked []string
	r := NewBM25Remote(scorerFunc(func(_ context.Context, q string, hits []pipeline.Hit) ([]float64, error) {
		asked = append(asked, q)
		out := make([]float64, len(hits))
		for i, h := range hits {
			out[i] = map[string]float64{"a": 0, "b": 2, "c": 5, "d": 2}[h.ID]
		}
		return out, nil
	}))
	got, err := r.Rerank(context.Background(), "q", []pipeline.Hit{hit("a", "", 0.9), hit("b", "", 0.8), hit("c", "", 0.7), hit("d", "", 0.6)}, 3)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range got {
		ids = append(ids, h.ID)
	}
	if !slices.Equal(ids, []string{"c", "b", "d"}) || *got[0].RerankScore != 5 || !slices.Equal(asked, []string{"q"}) {
		t.Errorf("reranked %v (top score %v), asked %v; want c, b, d (5) after one request for q", ids, *got[0].RerankScore, asked)
	}
	// A corpus without statistics: the candidates' own, as NewBM25(nil).
	none := NewBM25Remote(scorerFunc(func(context.Context, string, []pipeline.Hit) ([]float64, error) { return nil, nil }))
	got, err = none.Rerank(context.Background(), "prefill time", []pipeline.Hit{hit("a", "the cat", 0.9), hit("b", "prefill time is measured", 0.8)}, 2)
	if err != nil || got[0].ID != "b" {
		t.Errorf("no corpus scores: %v, %v; want b first, by the candidates' statistics", got, err)
	}
	failing := NewBM25Remote(scorerFunc(func(context.Context, string, []pipeline.Hit) ([]float64, error) {
		return nil, fmt.Errorf("qdrant down")
	}))
	if _, err := failing.Rerank(context.Background(), "q", []pipeline.Hit{hit("a", "", 1)}, 1); err == nil ||
		err.Error() != "reranking 1 candidates by BM25: qdrant down" {
		t.Errorf("a failing scorer: err = %v", err)
	}
}
