#!/usr/bin/env bash
# Ingests PostgreSQL 15's HTML documentation (Debian package postgresql-doc-15:
# 1,173 files, 18 MB) with the embedded defaults (hash embedder, HNSW index)
# into a fresh data dir, RUNS times on each of CORES (the process pinned to
# that many cores with taskset, GOMAXPROCS set to match), and prints per run
# the CPU seconds (user + system), the wall time, the peak RSS and the bytes
# of the index, then per core count the range (min–max) of each and the wall
# ratio of the first core count to the last: median against median, and the
# median and range of the ratios within each run (a run measures every core
# count back to back).
# The package is installed when missing and never enters the repository.
#
# BASELINE=<commit> builds that commit too (git archive into a temporary
# folder, nothing checked out) and measures both binaries in alternation, so
# a comparison sees the same machine load.
#
# Usage: [RUNS=3] [CORES="1 2"] [BASELINE=main] scripts/bench-ingest-pgdocs.sh [ingest flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
docs=$(scripts/ensure-pgdocs.sh)
runs=${RUNS:-3}
cores=${CORES:-"1 2"}
ncpu=$(nproc)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

go build -o bin/ragtime ./cmd/ragtime
bins=("current=bin/ragtime")
if [ -n "${BASELINE:-}" ]; then
	rev=$(git rev-parse --short "$BASELINE")
	mkdir "$tmp/src"
	git archive "$rev" | tar -x -C "$tmp/src"
	(cd "$tmp/src" && go build -o "$tmp/ragtime-baseline" ./cmd/ragtime)
	bins+=("baseline($rev)=$tmp/ragtime-baseline")
fi

echo "files: $(find "$docs" -name '*.html' | wc -l), $(du -sh "$docs" | cut -f1); $(date -u '+%Y-%m-%d %H:%M UTC'), $ncpu cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
results="$tmp/results"
: >"$results"
for run in $(seq "$runs"); do
	for n in $cores; do
		if [ "$n" -gt "$ncpu" ]; then
			echo "bench-ingest-pgdocs: CORES asks for $n cores, the machine has $ncpu" >&2
			exit 1
		fi
		for b in "${bins[@]}"; do
			name=${b%%=*} bin=${b#*=}
			data="$tmp/data"
			rm -rf "$data"
			GOMAXPROCS=$n /usr/bin/time -f '%e %U %S %M' -o "$tmp/time" \
				taskset -c "0-$((n - 1))" "$bin" ingest --data-dir "$data" "$@" "$docs" >"$tmp/out" 2>"$tmp/err" ||
				{ cat "$tmp/err" >&2; exit 1; }
			read -r wall user sys rss <"$tmp/time"
			bytes=$(du -sb "$data/index" | cut -f1)
			cpu=$(echo "$user + $sys" | bc)
			printf '%-20s cores %d run %d: CPU %5.2f s (user %.2f + sys %.2f), wall %6.2f s, peak RSS %4d MB, index %d bytes\n' \
				"$name" "$n" "$run" "$cpu" "$user" "$sys" "$wall" $((rss / 1024)) "$bytes"
			echo "$name $n $cpu $wall $((rss / 1024))" >>"$results"
		done
	done
done

echo "summary (min–max over $runs runs):"
first=${cores%% *} last=${cores##* }
for b in "${bins[@]}"; do
	name=${b%%=*}
	for n in $cores; do
		awk -v b="$name" -v n="$n" '$1 == b && $2 == n {
			c[++k] = $3; w[k] = $4; r[k] = $5 }
			END {
				cmin = cmax = c[1]; wmin = wmax = w[1]; rmin = rmax = r[1]
				for (i = 2; i <= k; i++) {
					if (c[i] < cmin) cmin = c[i]; if (c[i] > cmax) cmax = c[i]
					if (w[i] < wmin) wmin = w[i]; if (w[i] > wmax) wmax = w[i]
					if (r[i] < rmin) rmin = r[i]; if (r[i] > rmax) rmax = r[i]
				}
				printf "  %-20s cores %d: CPU %.2f–%.2f s, wall %.2f–%.2f s, peak RSS %d–%d MB\n", b, n, cmin, cmax, wmin, wmax, rmin, rmax
			}' "$results"
	done
	if [ "$first" != "$last" ]; then
		median() { awk -v b="$name" -v n="$1" '$1 == b && $2 == n { print $4 }' "$results" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
		m1=$(median "$first") m2=$(median "$last")
		echo "  $name: median wall on $first core(s) / on $last: $m1 s / $m2 s = $(echo "scale=2; $m1 / $m2" | bc)×"
		# Each run measures every core count back to back, so the ratio
		# within a run is not moved by the machine's load drifting from one
		# run to the next: on a shared machine it is the steadier figure.
		awk -v b="$name" -v f="$first" -v l="$last" '$1 == b && $2 == f { a[++i] = $4 } $1 == b && $2 == l { z[++j] = $4 }
			END { for (k = 1; k <= i && k <= j; k++) print a[k] / z[k] }' "$results" | sort -n |
			awk -v b="$name" -v f="$first" -v l="$last" '{ v[NR] = $1 } END {
				m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
				printf "  %s: wall on %s core(s) / on %s within each run: median %.2f×, range %.2f–%.2f×\n", b, f, l, m, v[1], v[NR] }'
	fi
done
