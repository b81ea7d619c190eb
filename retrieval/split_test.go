package retrieval

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tmc/langchaingo/textsplitter"
)

// TestChunkerAgreesWithLangchaingo splits the repository's docs and random
// texts built of the separators with both the chunker and langchaingo's
// RecursiveCharacter it was written from: the chunks must be the same.
func TestChunkerAgreesWithLangchaingo(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs to split: %v", err)
	}
	var texts []string
	for _, p := range docs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"\n# ", "\n## ", "\n### ", "\n\n", "\n", ". ", " ", "a", "bé", "prefill", "the first token", "x"}
	for range 300 {
		var b strings.Builder
		for range rng.IntN(400) {
			b.WriteString(words[rng.IntN(len(words))])
		}
		texts = append(texts, b.String())
	}
	for _, sz := range [][2]int{{1000, 150}, {200, 0}, {64, 16}, {10, 9}, {3, 5}} {
		c := chunker{size: sz[0], overlap: sz[1]}
		lc := textsplitter.NewRecursiveCharacter(
			textsplitter.WithChunkSize(sz[0]), textsplitter.WithChunkOverlap(sz[1]),
			textsplitter.WithSeparators(splitSeparators), textsplitter.WithKeepSeparator(true),
			textsplitter.WithLenFunc(utf8.RuneCountInString))
		for i, text := range texts {
			want, err := lc.SplitText(text)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.split(text); !slices.Equal(got, want) {
				t.Fatalf("size %d overlap %d, text %d (%.60q…): chunker made %d chunks, langchaingo %d\n got %q\nwant %q",
					sz[0], sz[1], i, text, len(got), len(want), got, want)
			}
		}
	}
}
