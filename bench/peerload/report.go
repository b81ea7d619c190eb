package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// pct is the p-th percentile (0–100) of xs by nearest rank; NaN when empty.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// spread renders the median of per-round values with their range.
func spread(vals []float64, format string) string {
	if len(vals) == 0 {
		return "-"
	}
	med := pct(vals, 50)
	lo, hi := slices.Min(vals), slices.Max(vals)
	if len(vals) == 1 || lo == hi {
		return fmt.Sprintf(format, med)
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", med, lo, hi)
}

// perRound maps each round's trial through f.
func perRound(ts []trial, f func(trial) float64) []float64 {
	out := make([]float64, 0, len(ts))
	for _, t := range ts {
		if v := f(t); !math.IsNaN(v) && !math.IsInf(v, 0) {
			out = append(out, v)
		}
	}
	return out
}

func report(w io.Writer, cfg *config, results map[string]map[int][]trial) {
	fmt.Fprintf(w, "\n%d rounds, %d-token answers, top_k %d; per cell the median over rounds [min–max]\n", cfg.rounds, cfg.maxTokens, cfg.topK)
	if cfg.stagger > 0 {
		fmt.Fprintf(w, "each trial's streams started spread over %s (asks arrive steadily, not in waves)\n", cfg.stagger)
	} else {
		fmt.Fprintf(w, "each trial's streams started at once (at 100 streams asks arrive in waves of 100)\n")
	}
	fmt.Fprintln(w, "added TTFT = the service's client-observed TTFT minus llmsim's own in the same round and concurrency")
	for _, c := range cfg.concurrency {
		sim := results["llmsim"][c]
		fmt.Fprintf(w, "\n## %d concurrent streams\n\n", c)
		fmt.Fprintln(w, "| target | asks | errors | TTFT p50 ms | added TTFT p50 ms | added TTFT p99 ms | asks/s | CPU ms/ask | peak RSS MB |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, name := range cfg.targets {
			ts := results[name][c]
			added := func(p float64) func(int) float64 {
				return func(i int) float64 { return pct(ts[i].ttft, p) - pct(sim[i].ttft, p) }
			}
			asks, errs := 0, 0
			for _, t := range ts {
				asks += t.asks
				errs += t.errs
			}
			addedCol := func(p float64) string {
				if name == "llmsim" {
					return "—"
				}
				return spread(indexed(len(ts), added(p)), "%.1f")
			}
			fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", name, asks, errs,
				spread(perRound(ts, func(t trial) float64 { return pct(t.ttft, 50) }), "%.1f"),
				addedCol(50), addedCol(99),
				spread(perRound(ts, trial.asksPerSec), "%.0f"),
				spread(perRound(ts, trial.cpuPerAsk), "%.2f"),
				spread(perRound(ts, func(t trial) float64 { return float64(t.rssKB) / 1024 }), "%.0f"))
		}
		rt, peer := results["ragtime"][c], results["peer"][c]
		ratio := func(f func(i int) float64) string { return spread(indexed(min(len(rt), len(peer)), f), "%.2f") }
		if cfg.has("peer") && cfg.has("ragtime") {
			fmt.Fprintf(w, "\nragtime vs peer: added TTFT p50 %s× the peer's, p99 %s×; asks/s %s×; CPU per ask %s×\n",
				ratio(func(i int) float64 {
					return (pct(rt[i].ttft, 50) - pct(sim[i].ttft, 50)) / (pct(peer[i].ttft, 50) - pct(sim[i].ttft, 50))
				}),
				ratio(func(i int) float64 {
					return (pct(rt[i].ttft, 99) - pct(sim[i].ttft, 99)) / (pct(peer[i].ttft, 99) - pct(sim[i].ttft, 99))
				}),
				ratio(func(i int) float64 { return rt[i].asksPerSec() / peer[i].asksPerSec() }),
				ratio(func(i int) float64 { return rt[i].cpuPerAsk() / peer[i].cpuPerAsk() }))
		}
		if relay := results["relay"][c]; cfg.has("relay") && cfg.has("ragtime") {
			// The relay adds next to nothing to TTFT, so its ratio would be
			// noise: the difference says what ragtime's stages cost.
			n := min(len(rt), len(relay))
			fmt.Fprintf(w, "ragtime vs relay (the floor): CPU per ask %s×; added TTFT p50 %s ms more than the relay's; asks/s %s×; the relay's embedding call p50 %s ms\n",
				spread(indexed(n, func(i int) float64 { return rt[i].cpuPerAsk() / relay[i].cpuPerAsk() }), "%.2f"),
				spread(indexed(n, func(i int) float64 { return pct(rt[i].ttft, 50) - pct(relay[i].ttft, 50) }), "%.1f"),
				spread(indexed(n, func(i int) float64 { return rt[i].asksPerSec() / relay[i].asksPerSec() }), "%.2f"),
				spread(perRound(relay, func(t trial) float64 { return pct(t.emb, 50) }), "%.2f"))
		}
		if cfg.has("ragtime") {
			fmt.Fprintf(w, "ragtime: client TTFT − ttft_ms p50 %s ms, p99 %s ms; embed p50 %s ms (modelled %.1f ms); TIME_WAIT to llmsim %s\n"+
				"ragtime: TTFT p99 %s ms; RSS per open stream (peak − before the trial) / streams %s KB\n",
				spread(perRound(rt, func(t trial) float64 { return pct(t.gap, 50) }), "%.1f"),
				spread(perRound(rt, func(t trial) float64 { return pct(t.gap, 99) }), "%.1f"),
				spread(perRound(rt, func(t trial) float64 { return pct(t.emb, 50) }), "%.2f"), cfg.embedModelMs,
				spread(perRound(rt, func(t trial) float64 { return float64(t.timeWait) }), "%.0f"),
				spread(perRound(rt, func(t trial) float64 { return pct(t.ttft, 99) }), "%.1f"),
				spread(perRound(rt, func(t trial) float64 { return float64(t.rssKB-t.idleKB) / float64(c) }), "%.1f"))
		}
		// What each process asked of the kernel per answer: a token costs
		// a write to the client (reads are not comparable: writeCalls).
		var calls []string
		for _, name := range cfg.targets {
			ts := results[name][c]
			calls = append(calls, fmt.Sprintf("%s %s", name,
				spread(perRound(ts, func(t trial) float64 { return float64(t.writes) / float64(t.answered()) }), "%.1f")))
		}
		fmt.Fprintf(w, "write system calls per ask: %s\n", strings.Join(calls, "; "))
		for _, name := range cfg.targets {
			kinds := map[string]int{}
			for _, t := range results[name][c] {
				for k, n := range t.errKinds {
					kinds[k] += n
				}
			}
			if len(kinds) > 0 {
				var parts []string
				for _, k := range slices.Sorted(maps.Keys(kinds)) {
					parts = append(parts, fmt.Sprintf("%s ×%d", k, kinds[k]))
				}
				fmt.Fprintf(w, "%s errors: %s\n", name, strings.Join(parts, ", "))
			}
		}
	}
}

// answered is the trial's asks that ended well, at least 1 (a divisor).
func (t trial) answered() int { return max(t.asks-t.errs, 1) }

// cpuPerAsk is the process's CPU ms per answer.
func (t trial) cpuPerAsk() float64 { return t.cpuMs / float64(t.answered()) }

// asksPerSec is the answers per second of the trial's wall time.
func (t trial) asksPerSec() float64 { return float64(t.asks-t.errs) / t.wall.Seconds() }

// indexed evaluates f for 0..n-1, dropping NaN and Inf.
func indexed(n int, f func(int) float64) []float64 {
	out := make([]float64, 0, n)
	for i := range n {
		if v := f(i); !math.IsNaN(v) && !math.IsInf(v, 0) {
			out = append(out, v)
		}
	}
	return out
}
