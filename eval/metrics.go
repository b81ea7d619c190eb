package eval

import (
	"math"
)

// Ranked is what a question is judged on: the ids of the search results in
// rank order, collapsed to the unit the question is labelled in. A question
// with relevant chunk ids is judged on chunks (each result is one unit); a
// question with relevant doc ids on documents, each at the rank of its first
// (best) result, so that a page's later chunks neither count again nor push
// other pages down. This is the counting the sweep uses for the context's
// documents.
func Ranked(q Question, results []Result) (ranked, relevant []string) {
	if len(q.RelevantChunks) > 0 {
		ranked = make([]string, 0, len(results))
		for _, r := range results {
			ranked = append(ranked, r.ChunkID)
		}
		return ranked, q.RelevantChunks
	}
	seen := make(map[string]bool, len(results))
	for _, r := range results {
		if !seen[r.DocID] {
			seen[r.DocID] = true
			ranked = append(ranked, r.DocID)
		}
	}
	return ranked, q.Relevant
}

// HitAt is 1 when any relevant id is among the first k of ranked, else 0.
func HitAt(ranked, relevant []string, k int) float64 {
	if ReciprocalRankAt(ranked, relevant, k) > 0 {
		return 1
	}
	return 0
}

// ReciprocalRankAt is 1/rank of the first relevant id among the first k of
// ranked (ranks from 1), 0 when none is; its mean is MRR@k.
func ReciprocalRankAt(ranked, relevant []string, k int) float64 {
	want := set(relevant)
	for i, id := range ranked[:min(k, len(ranked))] {
		if want[id] {
			return 1 / float64(i+1)
		}
	}
	return 0
}

// NDCGAt is the normalised discounted cumulative gain at k with binary
// gains: DCG = Σ 1/log2(rank+1) over the relevant ids among the first k
// (each id once), divided by the DCG of the ideal ranking, which puts
// min(k, len(relevant)) relevant ids first. 0 when relevant is empty.
func NDCGAt(ranked, relevant []string, k int) float64 {
	want := set(relevant)
	if len(want) == 0 {
		return 0
	}
	var dcg, ideal float64
	seen := map[string]bool{}
	for i, id := range ranked[:min(k, len(ranked))] {
		if want[id] && !seen[id] {
			seen[id] = true
			dcg += 1 / math.Log2(float64(i+2))
		}
	}
	for i := range min(k, len(want)) {
		ideal += 1 / math.Log2(float64(i+2))
	}
	return dcg / ideal
}

// Percentile is the p-quantile (0..1) of sorted xs by linear interpolation
// between closest ranks, the definition of PostgreSQL's percentile_cont, so
// figures computed here equal the SQL views'. It is four lines, and gonum's
// stat.Quantile offers only other definitions. NaN when xs is empty.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := p * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
