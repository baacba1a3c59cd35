#!/usr/bin/env bash
# Builds kube-apiserver VERSION (e.g. v1.32.13), or another command of
# k8s.io/kubernetes/cmd named by COMPONENT (kube-controller-manager), from the published
# k8s.io/kubernetes module through the Go module proxy, in a throwaway module
# under the user's cache dir (never in this repository), and prints the
# binary's path. The build runs only when the binary is missing.
#
# k8s.io/kubernetes's go.mod replaces every k8s.io/* staging module with
# ./staging/src/k8s.io/<name>, which a module consumer cannot see; the
# throwaway module therefore replaces each of them with the published
# v0.<minor>.<patch> of the same release.
set -euo pipefail

version=${1:?usage: kube-apiserver-build.sh vX.Y.Z [COMPONENT]}
component=${2:-kube-apiserver}
cache=${ALLOCATOR_KUBE_APISERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allocator/kube-apiserver}
dir="$cache/$version"
bin="$dir/$component"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

staging_version="v0.${version#v1.}"
mkdir -p "$dir"
cd "$dir"
# GOFLAGS from the caller (e.g. -mod=...) must not leak into this module.
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local GOWORK=off
if [ ! -f go.mod ]; then
  go mod init allocator.local/kube-apiserver-build >/dev/null 2>&1
fi
upstream_mod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$upstream_mod" ] || { echo "no go.mod for k8s.io/kubernetes@$version" >&2; exit 1; }

# Every `k8s.io/x => ./staging/src/k8s.io/x` line becomes `k8s.io/x => k8s.io/x v0.Y.Z`.
mods=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/src/.*#\1#p' "$upstream_mod")
[ -n "$mods" ] || { echo "no staging replaces found in $upstream_mod" >&2; exit 1; }
for m in $mods; do
  go mod edit -replace "$m=$m@$staging_version"
done
go mod edit -require "k8s.io/kubernetes@$version"
# The go directive of the upstream module (go mod tidy would raise ours to it anyway).
go mod edit -go "$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$upstream_mod")"
# `go get` of the one package, not `go mod tidy`: tidy also resolves the tests
# of every dependency, and some of their modules (e.g. k8s.io/csi-translation-lib)
# are not served by every module proxy; the build needs none of them.
go get "k8s.io/kubernetes/cmd/$component@$version" >&2
go build -trimpath -o "$bin.tmp" "k8s.io/kubernetes/cmd/$component" >&2
mv "$bin.tmp" "$bin"
echo "$bin"
