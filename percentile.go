package ragtime

// NearestRank is the nearest-rank percentile p (0 < p ≤ 1) of sorted
// (ascending) values: the smallest value with at least p of the values at
// or below it. It is 0 for no values. A product p·n within 1e-6 above a
// whole number counts as that number, so that float rounding (0.95 × 20)
// does not skip a rank.
//
// It is the one percentile of single measurements in ragtime (ITL of a
// stream, `ragtime ttft`, the simulator's load report); the stored
// dashboards use PostgreSQL's percentile_cont, as sweep.Percentile does.
func NearestRank(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[NearestRankIndex(len(sorted), p)]
}

// NearestRankIndex is NearestRank's index into n (> 0) sorted values.
func NearestRankIndex(n int, p float64) int {
	i := int(p*float64(n)+0.999999) - 1
	return max(0, min(i, n-1))
}
