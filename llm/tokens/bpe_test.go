package tokens

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestMergeLongPieceMatchesShort checks the heap merge against tiktoken's
// scan on pieces of every length, from alphabets that merge a lot.
func TestMergeLongPieceMatchesShort(t *testing.T) {
	t.Parallel()
	alphabets := []string{"ab", "a ", " ", "=-", "abcdefgh ", "首个令牌", "the quick brown fox", "\x00\xff\x80"}
	for _, name := range Encodings {
		ranks := newCounter(t, name).enc.ranks
		rng := rand.New(rand.NewPCG(1, uint64(len(name))))
		for _, alphabet := range alphabets {
			for n := 1; n <= 300; n += 1 + n/8 {
				var b strings.Builder
				for b.Len() < n {
					b.WriteByte(alphabet[rng.IntN(len(alphabet))])
				}
				piece := b.String()
				short := mergeShortPiece(piece, ranks, nil)
				long := mergeLongPiece(piece, ranks)
				starts := func(parts []bpePart) []int {
					var s []int
					for _, p := range parts {
						s = append(s, p.start)
					}
					return s
				}
				if !slices.Equal(starts(short), starts(long)) {
					t.Fatalf("%s: merges of %q differ:\nscan %v\nheap %v", name, piece, starts(short), starts(long))
				}
			}
		}
	}
}
