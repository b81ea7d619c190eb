#!/usr/bin/env bash
# Runs every native Go fuzz target for FUZZTIME each (default 30s) and
# prints each one's executions. A target fails only on a finding: a new
# failing input written under its package's testdata/fuzz (keep it there:
# it is a regression seed that `make test` replays). Go 1.26's fuzzing
# coordinator can also end a run with a bare "context deadline exceeded" when
# a worker misses the stop deadline on a loaded machine (golang/go#75804,
# fixed in Go 1.27); that run wrote no input and is reported as such, not
# as a finding. Usage: FUZZTIME=1m scripts/fuzz.sh [target-regexp]
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-30s}
only=${1:-.}
status=0
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for target in $(grep -ho '^func \(Fuzz[A-Za-z0-9_]*\)' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
		echo "$target" | grep -Eq "$only" || continue
		before=$(ls "$dir/testdata/fuzz/$target" 2>/dev/null | wc -l)
		out=$(go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg" 2>&1)
		rc=$?
		after=$(ls "$dir/testdata/fuzz/$target" 2>/dev/null | wc -l)
		execs=$(echo "$out" | grep -o 'execs: [0-9]*' | tail -1)
		if [ $rc -eq 0 ]; then
			echo "ok    $pkg $target: $execs in $fuzztime"
		elif [ "$after" -gt "$before" ]; then
			echo "FOUND $pkg $target: $execs; new input in $dir/testdata/fuzz/$target"
			echo "$out" | grep -v '^fuzz: elapsed' | tail -20
			status=1
		elif echo "$out" | grep -q 'context deadline exceeded'; then
			echo "ok    $pkg $target: $execs in $fuzztime (the run ended on Go's stop-deadline race, no input written)"
		else
			echo "FAIL  $pkg $target: $execs"
			echo "$out" | tail -20
			status=1
		fi
	done
done
exit $status
