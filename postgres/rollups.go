package postgres

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"ragtime"
)

// The roll-up histogram's buckets (migration 0031): bucket i ≥ 0 counts the
// durations in [rollupUnitMs × rollupBase^i, rollupUnitMs × rollupBase^(i+1)),
// bucket -1 those under rollupUnitMs. Read as the point whose relative
// distance to both ends is equal, a bucket is within
// (rollupBase−1)/(rollupBase+1) = 0.99 % of every duration in it.
const (
	rollupBase   = 1.02
	rollupUnitMs = 0.001
)

// Pseudo-stages of the roll-ups, beside the pipeline's stages.
const (
	rollupTTFT = "ttft" // ttft_ms of the queries with a first answer token
	rollupE2E  = "e2e"  // e2e_ms of every query: its n counts queries
	// e2e_error, e2e_cancelled: e2e_ms of the queries with that status.
	rollupE2EPrefix = "e2e_"
	// Means over a period are sum_ms / n of these (migration 0033): the
	// shares of TTFT /v1/stats charts, and the prompt and cached tokens of
	// the queries whose provider reports cached tokens (the hit rate is
	// their sums' ratio). Their histograms are of the values themselves.
	rollupShareQueue     = "share_queue"
	rollupShareRetrieval = "share_retrieval"
	rollupShareConnect   = "share_llm_connect"
	rollupSharePrefill   = "share_llm_prefill"
	rollupShareOverhead  = "share_overhead"
	rollupTokensPrompt   = "tokens_prompt"
	rollupTokensCached   = "tokens_cached"
)

var logRollupBase = math.Log(rollupBase)

// rollupBucket is SQL's rollup_bucket(ms).
func rollupBucket(ms float64) int {
	if !(ms >= rollupUnitMs) { // NaN too
		return -1
	}
	return int(math.Floor(math.Log(ms/rollupUnitMs) / logRollupBase))
}

// rollupKey is one row of query_rollups.
type rollupKey struct {
	span                   string // minute or hour
	start                  time.Time
	provider, model, stage string
}

// rollupRow is what a batch adds to one row of query_rollups.
type rollupRow struct {
	rollupKey
	n      int64
	sum    float64
	max    float64
	lo     int     // bucket of counts[0]
	counts []int64 // dense from bucket lo
}

// add counts one duration ms, whose bucket is b (rollupBucket(ms)).
func (r *rollupRow) add(ms float64, b int) {
	switch {
	case r.n == 0:
		r.lo, r.counts, r.max = b, []int64{0}, ms
	case b < r.lo:
		r.counts = append(make([]int64, r.lo-b, r.lo-b+len(r.counts)), r.counts...)
		r.lo = b
	case b >= r.lo+len(r.counts):
		r.counts = append(r.counts, make([]int64, b-r.lo-len(r.counts)+1)...)
	}
	r.counts[b-r.lo]++
	r.n++
	r.sum += ms
	r.max = max(r.max, ms)
}

// rollupsOf aggregates recs into the roll-up rows they add to, per UTC
// minute and hour × provider × model × stage, in key order (so that
// concurrent writers lock the rows they share in the same order).
func rollupsOf(recs []*ragtime.Record) []*rollupRow {
	// The rows of one period × provider × model by stage: consecutive
	// records mostly share a group, so a record costs a lookup by stage
	// name per value instead of one by the whole key.
	type group map[string]*rollupRow
	type value struct {
		stage  string
		ms     float64
		bucket int
	}
	groups := make(map[rollupKey]group)
	var rows []*rollupRow
	var lastKey [2]rollupKey
	var last [2]group
	var values []value // one record's, added to its minute and its hour
	for _, rec := range recs {
		values = values[:0]
		add := func(stage string, ms float64) {
			values = append(values, value{stage, ms, rollupBucket(ms)})
		}
		for _, s := range rec.Stages {
			add(s.Name, s.DurationMs)
		}
		if rec.TTFTMs != nil {
			add(rollupTTFT, *rec.TTFTMs)
		}
		add(rollupE2E, rec.E2EMs)
		if rec.Status != ragtime.StatusOK {
			add(rollupE2EPrefix+rec.Status, rec.E2EMs)
		}
		// As /v1/stats' series computes them from the raw rows.
		if t := rec.TTFTMs; t != nil && *t != 0 {
			add(rollupShareQueue, rec.QueueMs / *t)
			add(rollupShareConnect, (rec.GenTTFTMs-rec.LLMPrefillMs) / *t)
			if rec.OverheadMs != nil {
				add(rollupShareOverhead, *rec.OverheadMs / *t)
			}
		}
		if rec.RetrievalShare != nil {
			add(rollupShareRetrieval, *rec.RetrievalShare)
		}
		if rec.PrefillShare != nil {
			add(rollupSharePrefill, *rec.PrefillShare)
		}
		if rec.Usage.CachedTokens != nil {
			add(rollupTokensPrompt, float64(rec.Usage.PromptTokens))
			add(rollupTokensCached, float64(*rec.Usage.CachedTokens))
		}

		at := rec.CreatedAt.UTC()
		for p, period := range [2]struct {
			span  string
			start time.Time
		}{{"minute", at.Truncate(time.Minute)}, {"hour", at.Truncate(time.Hour)}} {
			k := rollupKey{span: period.span, start: period.start, provider: rec.Provider, model: rec.Model}
			g := last[p]
			if g == nil || k != lastKey[p] {
				if g = groups[k]; g == nil {
					g = make(group, 32) // the stages and pseudo-stages of a query: ~20
					groups[k] = g
				}
				last[p], lastKey[p] = g, k
			}
			for _, v := range values {
				r := g[v.stage]
				if r == nil {
					kr := k
					kr.stage = v.stage
					r = &rollupRow{rollupKey: kr}
					g[v.stage] = r
					rows = append(rows, r)
				}
				r.add(v.ms, v.bucket)
			}
		}
	}
	out := rows
	slices.SortFunc(out, func(a, b *rollupRow) int {
		if c := strings.Compare(a.span, b.span); c != 0 {
			return c
		}
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		if c := strings.Compare(a.provider, b.provider); c != 0 {
			return c
		}
		if c := strings.Compare(a.model, b.model); c != 0 {
			return c
		}
		return strings.Compare(a.stage, b.stage)
	})
	return out
}

// upsertRollups adds rows to query_rollups in one statement: the rows go
// as parallel arrays, each histogram as its lowest bucket and the text of
// its counts, which SQL turns into an array subscripted by bucket.
const upsertRollups = `INSERT INTO query_rollups (span, start, provider, model, stage, n, sum_ms, max_ms, hist)
SELECT span, start, provider, model, stage, n, sum_ms, max_ms,
       ('[' || lo || ':' || (lo + cardinality(counts::bigint[]) - 1) || ']=' || counts)::bigint[]
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::bigint[],
            $7::double precision[], $8::double precision[], $9::integer[], $10::text[])
     AS u(span, start, provider, model, stage, n, sum_ms, max_ms, lo, counts)
ORDER BY span, start, provider, model, stage
ON CONFLICT (span, start, provider, model, stage) DO UPDATE
SET n = query_rollups.n + excluded.n,
    sum_ms = query_rollups.sum_ms + excluded.sum_ms,
    max_ms = greatest(query_rollups.max_ms, excluded.max_ms),
    hist = rollup_hist_add(query_rollups.hist, excluded.hist)`

// rollupArgs returns upsertRollups' arguments for rows.
func rollupArgs(rows []*rollupRow) []any {
	n := len(rows)
	span, start, provider, model, stage := make([]string, n), make([]time.Time, n), make([]string, n), make([]string, n), make([]string, n)
	count, sum, mx, lo, counts := make([]int64, n), make([]float64, n), make([]float64, n), make([]int32, n), make([]string, n)
	var b strings.Builder
	for i, r := range rows {
		span[i], start[i], provider[i], model[i], stage[i] = r.span, r.start, r.provider, r.model, r.stage
		count[i], sum[i], mx[i], lo[i] = r.n, r.sum, r.max, int32(r.lo)
		b.Reset()
		b.WriteByte('{')
		for j, c := range r.counts {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(c, 10))
		}
		b.WriteByte('}')
		counts[i] = b.String()
	}
	return []any{span, start, provider, model, stage, count, sum, mx, lo, counts}
}
