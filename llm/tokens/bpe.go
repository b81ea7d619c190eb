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

// longPiece is the length from which mergePiece merges with a heap: below
// it the quadratic scan is cheaper and needs no allocation.
const longPiece = 64

// mergePiece splits piece into its tokens by tiktoken's _byte_pair_merge:
// starting from single bytes, merge the adjacent pair with the lowest rank
// (the leftmost of equal ones) until no adjacent pair has a rank. It returns
// the parts, in parts' storage when piece is short: token j is
// piece[parts[j].start:parts[j+1].start] for j < len(parts)-1.
func mergePiece(piece string, ranks map[string]int, parts []bpePart) []bpePart {
	if len(piece) >= longPiece {
		return mergeLongPiece(piece, ranks)
	}
	return mergeShortPiece(piece, ranks, parts)
}

// mergeShortPiece is tiktoken's algorithm as it is written: scan for the
// lowest rank after each merge, quadratic in the piece's length.
func mergeShortPiece(piece string, ranks map[string]int, parts []bpePart) []bpePart {
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

// A mergeCandidate is a pair of adjacent parts that has a rank: the part
// starting at start and the one after it, ending at end.
type mergeCandidate struct {
	rank, start, end int
}

func (a mergeCandidate) before(b mergeCandidate) bool {
	return a.rank < b.rank || a.rank == b.rank && a.start < b.start
}

// mergeLongPiece makes the same merges as mergeShortPiece in O(n log n): the
// pairs wait in a min-heap ordered by rank and then start, which is the
// scan's choice (lowest rank, leftmost); a pair whose parts have changed
// since it was pushed is dropped when it surfaces. A long piece (a run of
// spaces or of one letter, a base64 blob) would otherwise cost its length
// squared.
func mergeLongPiece(piece string, ranks map[string]int) []bpePart {
	n := len(piece)
	// next[i] is where the part starting at i ends (n for the last);
	// prev[i] where the part before it starts; merged[i] that the part
	// starting at i has been absorbed by the one before it.
	next, prev, merged := make([]int, n), make([]int, n), make([]bool, n)
	var heap []mergeCandidate
	push := func(c mergeCandidate) {
		heap = append(heap, c)
		for i := len(heap) - 1; i > 0; {
			p := (i - 1) / 2
			if !heap[i].before(heap[p]) {
				break
			}
			heap[i], heap[p] = heap[p], heap[i]
			i = p
		}
	}
	pop := func() mergeCandidate {
		top := heap[0]
		last := len(heap) - 1
		heap[0] = heap[last]
		heap = heap[:last]
		for i := 0; ; {
			l, r, m := 2*i+1, 2*i+2, i
			if l < last && heap[l].before(heap[m]) {
				m = l
			}
			if r < last && heap[r].before(heap[m]) {
				m = r
			}
			if m == i {
				break
			}
			heap[i], heap[m] = heap[m], heap[i]
			i = m
		}
		return top
	}
	// pushPair pushes the pair of the part at start and the one after it,
	// if there is one after it and the pair has a rank.
	pushPair := func(start int) {
		mid := next[start]
		if mid == n {
			return
		}
		end := next[mid]
		if r := rankOf(ranks, piece[start:end]); r != noRank {
			push(mergeCandidate{rank: r, start: start, end: end})
		}
	}

	for i := range n {
		next[i], prev[i] = i+1, i-1
	}
	for i := 0; i+1 < n; i++ {
		pushPair(i)
	}
	for len(heap) > 0 {
		c := pop()
		mid := next[c.start]
		if merged[c.start] || mid == n || next[mid] != c.end {
			continue // stale: a part of it has merged since
		}
		next[c.start] = c.end
		merged[mid] = true
		if c.end < n {
			prev[c.end] = c.start
		}
		pushPair(c.start)
		if c.start > 0 {
			pushPair(prev[c.start])
		}
	}

	var parts []bpePart
	for i := 0; i < n; i = next[i] {
		parts = append(parts, bpePart{start: i})
	}
	return append(parts, bpePart{start: n})
}

func rankOf(ranks map[string]int, b string) int {
	if r, ok := ranks[b]; ok {
		return r
	}
	return noRank
}
