#!/usr/bin/env bash
# Copies the working tree into an empty temporary directory, as a clone of
# HEAD with the uncommitted changes (tracked and untracked, not ignored)
# laid over it, and runs a command there (default: the unit tier), to prove
# the repository is self-contained: a newcomer's `git clone` has nothing
# beside it. hack/test.sh runs its tests this way.
#
#   hack/fresh-clone.sh                     the unit tier in the copy
#   hack/fresh-clone.sh go test ./pkg/...   any command, run in the copy
#
# Set KEEP=1 to keep the copy for a look.
#
# The copy lives at one path, $TMPDIR/allocator-fresh-clone, whenever no
# other run holds it (a lock beside it; otherwise a new temporary
# directory): Go's build cache keys a package's compilation by its
# directory, so at one path a package compiled by an earlier run with the
# same sources is not compiled again; at a new path every package of the
# module would be compiled afresh in each build (race, plain and fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

base="${TMPDIR:-/tmp}/allocator-fresh-clone"
tmp=""
if command -v flock >/dev/null && exec 9>"$base.lock" && flock -n 9; then
  # The lock is held until this script exits (fd 9 closes with it).
  tmp=$base
  rm -rf "$tmp"
  mkdir -p "$tmp"
else
  tmp=$(mktemp -d)
fi
cleanup() { if [ "${KEEP:-}" = 1 ]; then echo "copy kept in $tmp"; else rm -rf "$tmp"; fi; }
trap cleanup EXIT

rev=$(git rev-parse HEAD)
git clone --quiet --no-hardlinks "$src" "$tmp/allocator"
cd "$tmp/allocator"
git checkout --quiet --detach "$rev"
# The working tree's changes: tracked files as a patch, untracked ones
# copied.
git -C "$src" diff --binary HEAD >"$tmp/changes.patch"
if [ -s "$tmp/changes.patch" ]; then git apply --binary "$tmp/changes.patch"; fi
rm -f "$tmp/changes.patch"
git -C "$src" ls-files -z --others --exclude-standard | (cd "$src" && tar --null -T - -cf -) | tar -xf -
[ "$(ls -A "$tmp")" = allocator ] || { echo "fresh-clone: $tmp is not empty beside the copy" >&2; exit 1; }
echo "fresh copy of $rev (with the working tree's changes) in $tmp/allocator"
# A binary built from the copy names its revision (Go stamps it from git).
go build -buildvcs=true -o "$tmp/allocator-bin" ./cmd/allocator
version=$("$tmp/allocator-bin" version)
echo "$version"
grep -q "revision $rev" <<<"$version" || { echo "fresh-clone: 'allocator version' does not name revision $rev" >&2; exit 1; }
rm -f "$tmp/allocator-bin"
if [ $# -eq 0 ]; then set -- hack/test.sh unit; fi
# Not the lock's descriptor: a process the command leaves behind must not
# keep the path from the next run.
"$@" 9>&-
