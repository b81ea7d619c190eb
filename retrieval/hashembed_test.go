package retrieval

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

func newEmbedder(t testing.TB, dim int) *HashEmbedder {
	t.Helper()
	e, err := NewHashEmbedder(dim)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func embedOne(t testing.TB, e *HashEmbedder, text string) []float32 {
	t.Helper()
	v, err := e.Embed(context.Background(), []string{text})
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}

func cosine(a, b []float32) float64 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return d / math.Sqrt(na*nb)
}

func TestNewHashEmbedderDimension(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dim     int
		wantErr bool
	}{
		{-1, true}, {0, true}, {7, true}, {8, false}, {512, false}, {65536, false}, {65537, true},
	}
	for _, tt := range tests {
		e, err := NewHashEmbedder(tt.dim)
		if tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), "--embed-dimensions") {
				t.Errorf("NewHashEmbedder(%d) error = %v, want one naming --embed-dimensions", tt.dim, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("NewHashEmbedder(%d): %v", tt.dim, err)
			continue
		}
		if e.Dimension() != tt.dim || e.Name() != "hash" {
			t.Errorf("NewHashEmbedder(%d) = dim %d name %q", tt.dim, e.Dimension(), e.Name())
		}
		if v := embedOne(t, e, "hello world"); len(v) != tt.dim {
			t.Errorf("dim %d: vector has %d components", tt.dim, len(v))
		}
	}
}

// TestHashEmbedGolden pins the output, so a change of hashing, weighting or
// word splitting (which would silently invalidate every stored index) shows.
func TestHashEmbedGolden(t *testing.T) {
	t.Parallel()
	e := newEmbedder(t, 16)
	got := embedOne(t, e, "Time to first token")
	want := []float32{0, 0, 0, 0, 0, 0, 0, 0.37796447, -0.75592893, 0, 0, 0, 0, -0.37796447, 0.37796447, 0}
	if len(got) != len(want) {
		t.Fatalf("got %d components, want %d", len(got), len(want))
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Fatalf("embedding changed:\n got %v\nwant %v", got, want)
		}
	}
	again := embedOne(t, e, "Time to first token")
	for i := range got {
		if got[i] != again[i] {
			t.Fatal("two embeddings of the same text differ")
		}
	}
}

func TestHashEmbedUnitNorm(t *testing.T) {
	t.Parallel()
	e := newEmbedder(t, 512)
	texts := []string{
		"a", "the the the", "prefill prefill prefill decode",
		"TTFT是首字延迟", strings.Repeat("long text with many words ", 200),
	}
	vecs, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vecs {
		var s float64
		for _, x := range v {
			s += float64(x) * float64(x)
		}
		if math.Abs(math.Sqrt(s)-1) > 1e-5 {
			t.Errorf("%q: norm %v, want 1", texts[i], math.Sqrt(s))
		}
	}
}

func TestHashEmbedEmptyIsZero(t *testing.T) {
	t.Parallel()
	e := newEmbedder(t, 64)
	for _, text := range []string{"", "   \n\t", "!!! ... ???"} {
		for _, x := range embedOne(t, e, text) {
			if x != 0 || math.IsNaN(float64(x)) {
				t.Fatalf("%q: got component %v, want a zero vector", text, x)
			}
		}
	}
	// Only stopwords still yields a vector: the words are used after all.
	if v := embedOne(t, e, "what is this"); cosine(v, v) == 0 {
		t.Error("stopword-only text embedded as zero")
	}
}

func TestHashEmbedSimilarity(t *testing.T) {
	t.Parallel()
	e := newEmbedder(t, 512)
	tests := []struct {
		query, near, far string
	}{
		{"how does prefill affect time to first token",
			"prefill time grows with prompt tokens and sets the time to first token",
			"the cat sat on the mat in the sunshine"},
		{"vector search with a heap",
			"exact vector search keeps the best hits in a bounded heap",
			"decode emits one token at a time"},
		// Bigrams: same words, but only "near" keeps the phrase together.
		{"new york",
			"a trip to new york",
			"york is new to me"},
	}
	for _, tt := range tests {
		q := embedOne(t, e, tt.query)
		near, far := cosine(q, embedOne(t, e, tt.near)), cosine(q, embedOne(t, e, tt.far))
		if near <= far {
			t.Errorf("%q: near %.3f <= far %.3f", tt.query, near, far)
		}
	}
}

func TestHashEmbedWordOrderMatters(t *testing.T) {
	t.Parallel()
	e := newEmbedder(t, 4096)
	a, b := embedOne(t, e, "dog bites man"), embedOne(t, e, "man bites dog")
	c := cosine(a, b)
	if c >= 0.99 || c <= 0.3 {
		t.Errorf("same words in another order: cosine %.3f, want clearly below 1 (bigrams differ) and clearly above 0 (unigrams agree)", c)
	}
}

func TestHashEmbedCancelled(t *testing.T) {
	t.Parallel()
	e := newEmbedder(t, 64)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Embed(ctx, []string{"x"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func BenchmarkHashEmbed(b *testing.B) {
	e := newEmbedder(b, 512)
	q := []string{"How much of the time to first token goes to retrieval and how much to prefill when the context grows longer?"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Embed(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}
