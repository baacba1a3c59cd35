#!/usr/bin/env bash
# Fails when a hand-written Go file is over 600 lines or a function over 100
# lines (test files and generated code aside), unless hack/size-allowlist.txt
# names it with a reason. Offenders are printed as "path:line name length".
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/sizecheck" ./hack/tools/sizecheck
rc=0
"$tmp/sizecheck" -max-file 600 -max-func 100 -allow hack/size-allowlist.txt . || rc=$?
case $rc in
  0) echo "no Go file over 600 lines, no function over 100, save those hack/size-allowlist.txt accepts" ;;
  1) echo "split the files and functions above along the seams of their job" >&2 ;;
esac
exit "$rc"
