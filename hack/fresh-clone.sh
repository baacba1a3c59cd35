#!/usr/bin/env bash
# Clones the repository's current HEAD into an empty temporary directory and
# runs the unit tests there, to prove the repository is self-contained: a
# newcomer's `git clone` has nothing beside it (the fixtures once lived in a
# directory outside the repository and every fixture test failed on a clone).
# Only committed work is tested. Set KEEP=1 to keep the clone for a look.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
cleanup() { if [ "${KEEP:-}" = 1 ]; then echo "clone kept in $tmp"; else rm -rf "$tmp"; fi; }
trap cleanup EXIT

rev=$(git rev-parse HEAD)
git clone --quiet --no-hardlinks "$(git rev-parse --show-toplevel)" "$tmp/allocator"
cd "$tmp/allocator"
git checkout --quiet --detach "$rev"
[ "$(ls -A "$tmp")" = allocator ] || { echo "fresh-clone: $tmp is not empty beside the clone" >&2; exit 1; }
echo "fresh clone of $rev in $tmp/allocator"
# A binary built from the clone names its revision (Go stamps it from git).
go build -buildvcs=true -o "$tmp/allocator-bin" ./cmd/allocator
version=$("$tmp/allocator-bin" version)
echo "$version"
grep -q "revision $rev" <<<"$version" || { echo "fresh-clone: 'allocator version' does not name revision $rev" >&2; exit 1; }
rm -f "$tmp/allocator-bin"
# The unit tier: every package whose tests need nothing but the clone and a
# real etcd (the fixtures, the parity record, the codecs); the integration
# tier already ran in the checkout.
hack/test.sh unit
