#!/usr/bin/env bash
# Runs every native Go fuzz target within one budget and lists each one's
# executions at the end.
#
# FUZZ_TOTAL (default 9m) bounds the whole run: each package's instrumented
# test binary is built once first (go test -c -fuzz; a cold build on 2 cores
# takes minutes, and used to be paid again per target, inside nothing's
# budget), then what is left is shared equally among the targets (at least
# 10s each). FUZZTIME sets one target's time instead (e.g. FUZZTIME=2m).
# -fuzztime counts from the start of a target's run, so its workers' start
# (the tokenizer oracles load their vocabularies) and the replay of its
# corpus come out of that share: the executions listed are what fuzzing got.
#
# A target fails only on a finding: a new failing input written under its
# package's testdata/fuzz (keep it there: it is a regression seed that
# `make test` replays). Go 1.26's fuzzing coordinator can also end a run with
# a bare "context deadline exceeded" when a worker misses the stop deadline on
# a loaded machine (golang/go#75804, fixed in Go 1.27); that run wrote no input
# and is reported as such, not as a finding.
# Usage: FUZZ_TOTAL=9m scripts/fuzz.sh [target-regexp]
set -uo pipefail
cd "$(dirname "$0")/.."
total=${FUZZ_TOTAL:-9m}
only=${1:-.}

# seconds converts 90, 90s, 2m or 1h to seconds.
seconds() {
	case "$1" in
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
total_s=$(seconds "$total")
start=$(date +%s)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache=$(go env GOCACHE)/fuzz

# The targets, as "package dir target" lines.
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func \(Fuzz[A-Za-z0-9_]*\)' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "$target" | grep -Eq "$only" && echo "$pkg $dir $target"
	done
done >"$work/targets"
n=$(wc -l <"$work/targets")
if [ "$n" -eq 0 ]; then
	echo "fuzz: no target matches $only" >&2
	exit 1
fi
echo "fuzz: $n targets in $(cut -d' ' -f1 "$work/targets" | sort -u | wc -l) packages; budget ${FUZZTIME:-$total in all}"

status=0
# Build each package's instrumented test binary once.
for pkg in $(cut -d' ' -f1 "$work/targets" | sort -u); do
	t0=$(date +%s)
	echo "fuzz: building the instrumented test binary of $pkg"
	if ! go test -c -fuzz . -o "$work/$(echo "$pkg" | tr / _).test" "$pkg" >"$work/build.log" 2>&1; then
		echo "FAIL  $pkg: the build failed"
		cat "$work/build.log"
		exit 1
	fi
	echo "fuzz: built $pkg in $(($(date +%s) - t0))s"
done

i=0
while read -r pkg dir target <&3; do
	i=$((i + 1))
	if [ -n "${FUZZTIME:-}" ]; then
		each=$(seconds "$FUZZTIME")
	else
		left=$((total_s - ($(date +%s) - start)))
		each=$((left / (n - i + 1)))
		[ "$each" -lt 10 ] && each=10
	fi
	echo "fuzz: [$i/$n] $pkg $target for ${each}s"
	before=$(ls "$dir/testdata/fuzz/$target" 2>/dev/null | wc -l)
	t0=$(date +%s)
	# Bounded even if a worker hangs: the share, plus time to stop.
	out=$(cd "$dir" && timeout --kill-after=10 $((each + 60)) "$work/$(echo "$pkg" | tr / _).test" \
		-test.run '^$' -test.fuzz "^$target\$" -test.fuzztime "${each}s" \
		-test.fuzzcachedir "$cache/$pkg" -test.paniconexit0 2>&1)
	rc=$?
	took=$(($(date +%s) - t0))
	after=$(ls "$dir/testdata/fuzz/$target" 2>/dev/null | wc -l)
	execs=$(echo "$out" | grep -o 'execs: [0-9]*' | tail -1 | grep -o '[0-9]*$')
	execs=${execs:-0}
	if [ $rc -eq 0 ]; then
		verdict=ok
	elif [ "$after" -gt "$before" ]; then
		verdict=FOUND
		echo "FOUND $pkg $target: new input in $dir/testdata/fuzz/$target"
		echo "$out" | grep -v '^fuzz: elapsed' | tail -20
		status=1
	elif echo "$out" | grep -q 'context deadline exceeded'; then
		verdict=ok # Go's stop-deadline race, no input written
	else
		verdict=FAIL
		echo "FAIL  $pkg $target"
		echo "$out" | tail -20
		status=1
	fi
	echo "$verdict $pkg $target $execs $took" >>"$work/results"
done 3<"$work/targets"

echo
echo "fuzz: executions per target ($(($(date +%s) - start))s in all, $(date -u +%Y-%m-%dT%H:%MZ)):"
while read -r verdict pkg target execs took; do
	printf '  %-5s %-22s %-24s %10d execs in %4ds (%d/s)\n' "$verdict" "$pkg" "$target" "$execs" "$took" $((execs / (took > 0 ? took : 1)))
done <"$work/results"
exit $status
