package tokens

import "math"

// noRank marks a pair that has no merge.
const noRank = math.MaxInt

// A bpePart is one part of a piece being merged: where it starts in the
// piece, and the rank of the merge of it with the part after it (noRank
// when there is none).
type bpePart struct {
	start int
	rank  int
}

// bytePairMerge splits piece into its tokens by tiktoken's _byte_pair_merge:
// starting from single bytes, merge the adjacent pair with the lowest rank
// (the leftmost of equal ones) until no adjacent pair has a rank. It returns
// the parts in parts' storage (grown if piece is longer): token j is
// piece[parts[j].start:parts[j+1].start] for j < len(parts)-1. Merging is
// quadratic in the piece's length, as tiktoken's is; pieces are words.
func bytePairMerge(piece string, ranks map[string]int, parts []bpePart) []bpePart {
	parts = parts[:0]
	minRank, minAt := noRank, -1
	for i := 0; i < len(piece)-1; i++ {
		r := rankOf(ranks, piece[i:i+2])
		if r < minRank {
			minRank, minAt = r, i
		}
		parts = append(parts, bpePart{start: i, rank: r})
	}
	parts = append(parts, bpePart{start: len(piece) - 1, rank: noRank}, bpePart{start: len(piece), rank: noRank})

	// rankAfterMerge is the rank of part i once it has absorbed part i+1:
	// the merge of it with part i+2.
	rankAfterMerge := func(i int) int {
		if i+3 < len(parts) {
			return rankOf(ranks, piece[parts[i].start:parts[i+3].start])
		}
		return noRank
	}
	for minRank != noRank {
		i := minAt
		if i > 0 {
			parts[i-1].rank = rankAfterMerge(i - 1)
		}
		parts[i].rank = rankAfterMerge(i)
		parts = append(parts[:i+1], parts[i+2:]...)

		minRank, minAt = noRank, -1
		for j, p := range parts[:len(parts)-1] {
			if p.rank < minRank {
				minRank, minAt = p.rank, j
			}
		}
	}
	return parts
}

func rankOf(ranks map[string]int, b string) int {
	if r, ok := ranks[b]; ok {
		return r
	}
	return noRank
}
