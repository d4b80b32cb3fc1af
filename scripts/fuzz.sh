#!/usr/bin/env bash
# Runs every native Go fuzz target of the module, one at a time, each for the
# given duration (go test -fuzz accepts one target in one package per run).
#
# Usage: scripts/fuzz.sh [FUZZTIME]     e.g. scripts/fuzz.sh 5s
#
# Targets are found by looking for `func FuzzXxx(` in *_test.go files. The
# script stops at the first failing target and says which one it was; a
# failing input is saved by go test under that package's testdata/fuzz/,
# which is committed so the case stays in the regression corpus.
set -euo pipefail

fuzztime="${1:-60s}"
GO="${GO:-go}"

cd "$(dirname "$0")/.."

# Directories holding test files that declare fuzz targets. vendor-like and
# generated trees are skipped; testdata is ignored by the go tool anyway.
mapfile -t files < <(
	find . \( -name .git -o -name node_modules -o -name testdata -o -name vendor -o -path ./bin -o -path ./data \) -prune \
		-o -type f -name '*_test.go' -print |
		LC_ALL=C sort |
		xargs -r grep -l -E '^func Fuzz[A-Za-z0-9_]*\(' || true
)

if [ "${#files[@]}" -eq 0 ]; then
	echo "fuzz: no fuzz targets found (no 'func FuzzXxx' in any _test.go); nothing to do"
	exit 0
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run_one DIR NAME: fuzz one target. Go 1.26 has a race in its fuzz
# coordinator (golang/go#75804, fixed in Go 1.27): when -fuzztime runs out
# while a worker is mid-call, the target fails with a bare "context deadline
# exceeded" line although nothing was found. A real finding always prints
# "Failing input written to"; a bare deadline is retried, and
# if it persists it is reported loudly but does not fail the run, because
# plain `go test` replays the committed corpus deterministically anyway.
run_one() {
	local dir=$1 name=$2 attempt
	for attempt in 1 2 3; do
		if [ "$attempt" -eq 1 ]; then
			echo "fuzz: $dir $name for $fuzztime"
		else
			echo "fuzz: $dir $name for $fuzztime (attempt $attempt)"
		fi
		if "$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$dir" 2>&1 | tee "$log"; then
			return 0
		fi
		if grep -q -x '[[:space:]]*context deadline exceeded' "$log" &&
			! grep -q -E 'Failing input written to|panic:' "$log"; then
			echo "fuzz: $name hit the Go fuzz coordinator's deadline race (golang/go#75804); nothing was found" >&2
			continue
		fi
		return 1
	done
	echo "fuzz: WARNING: $name in $dir ended 3 times with a bare 'context deadline exceeded' and no failing input;" >&2
	echo "fuzz: WARNING: treating it as the Go 1.26 toolchain race (golang/go#75804), not as a finding" >&2
	flaked=$((flaked + 1))
	return 0
}

count=0
flaked=0
for dir in $(printf '%s\n' "${files[@]}" | xargs -n1 dirname | LC_ALL=C sort -u); do
	names=$(cat "$dir"/*_test.go |
		sed -n -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' | LC_ALL=C sort -u)
	for name in $names; do
		count=$((count + 1))
		if ! run_one "$dir" "$name"; then
			echo "fuzz: FAILED: $name in $dir" >&2
			echo "fuzz: rerun with: $GO test -run='^\$' -fuzz='^${name}\$' $dir" >&2
			exit 1
		fi
	done
done
echo "fuzz: $count target(s) passed ($flaked only through the toolchain deadline race)"
