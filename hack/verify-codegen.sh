#!/usr/bin/env bash
# Fails when pkg/generated/openapi differs from what hack/update-codegen.sh
# would generate now.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp pkg/generated/openapi/doc.go "$tmp/doc.go" 2>/dev/null || true
OUT_DIR="$tmp" hack/update-codegen.sh
if ! diff -u pkg/generated/openapi/zz_generated.openapi.go "$tmp/zz_generated.openapi.go" > "$tmp/diff"; then
  head -50 "$tmp/diff"
  echo "pkg/generated/openapi is stale: run hack/update-codegen.sh" >&2
  exit 1
fi
echo "pkg/generated/openapi is up to date"
