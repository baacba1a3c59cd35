#!/usr/bin/env bash
# Runs every Fuzz* target of the module for a short while (default 10s each).
# Usage: hack/fuzz.sh [duration]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-10s}"
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' || true)
  for target in $targets; do
    echo "-- $pkg $target ($fuzztime)"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"
  done
done
