#!/usr/bin/env bash
# Runs every Fuzz* target of the module for a short while (default 10s each),
# JOBS targets at a time (default 2: each fuzzes with one worker, so two keep
# two cores busy).
# Usage: hack/fuzz.sh [duration]
#
# A target fails the run when the fuzzer found an input (it writes it under
# testdata/fuzz/ and prints "Failing input written"). On a loaded 2-core
# machine the fuzz coordinator sometimes stops waiting for a starved worker
# and reports "context deadline exceeded" with no input at all; that is the
# harness, not our code, so it is reported as a warning and the target is run
# once more.
set -euo pipefail
cd "$(dirname "$0")/.."

# fuzz_one PKG TARGET DURATION fuzzes one target; its output goes to stdout
# once it is done, so that targets run side by side do not interleave.
fuzz_one() {
  local pkg=$1 target=$2 fuzztime=$3 attempt out report=""
  for attempt in 1 2; do
    report+="-- $pkg $target ($fuzztime, attempt $attempt)"$'\n'
    if out=$(go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" -parallel=1 "$pkg" 2>&1); then
      printf '%s%s\n' "$report" "$(tail -n 2 <<<"$out")"
      return 0
    fi
    report+="$(tail -n 20 <<<"$out")"$'\n'
    if grep -q "Failing input written" <<<"$out" || ! grep -q "context deadline exceeded" <<<"$out"; then
      printf '%sFAIL: %s %s\n' "$report" "$pkg" "$target"
      return 1
    fi
    report+="warning: $target: the fuzz harness timed out waiting for a worker (no failing input)"$'\n'
  done
  printf '%swarning: %s timed out twice; its seed corpus passed in go test\n' "$report" "$target"
}

# hack/fuzz.sh --one DURATION PKG TARGET: one target (what xargs runs).
if [ "${1:-}" = --one ]; then
  fuzz_one "$3" "$4" "$2"
  exit
fi
fuzztime="${1:-10s}"
# One line per target, "PKG TARGET"; xargs exits non-zero if any failed.
go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do
  grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed "s|^func |$pkg |" || true
done | xargs -r -P "${JOBS:-2}" -L 1 "$0" --one "$fuzztime"
