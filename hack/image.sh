#!/usr/bin/env bash
# Builds the allocator image from this checkout with docker, podman or
# nerdctl (the first found; TOOL=… picks one), tagged with the release in
# internal/version/VERSION: the version `allocator --version` prints and the
# tag the manifests in deploy/ name (test/e2e fails when they differ). Never
# :latest: deploy/ names the version with imagePullPolicy IfNotPresent, so a
# node uses the image built or loaded on it instead of pulling one. Every
# build of one release gets its tag; give a build of a changed tree its own
# (TAG=…) to tell it apart on a node that already has the release.
#
#   hack/image.sh                 build ghcr.io/allocator/allocator:<release>
#   TAG=dev-$(git rev-parse --short HEAD) hack/image.sh   build with another tag
#   IMAGE=registry.example/allocator hack/image.sh
#   hack/image.sh --print-tag     print the image name and tag only, build nothing
#
# Exit status: 0 built; 1 failed; 2 no container tool here: nothing built,
# and it prints how to build the image elsewhere (or the binary alone).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-ghcr.io/allocator/allocator}

release=$(<internal/version/VERSION)
tag=${TAG:-$release}
ref="$IMAGE:$tag"
if [ "${1:-}" = --print-tag ]; then
  echo "$ref"
  exit 0
fi
deployed=$(sed -n 's|^ *image: *||p' deploy/static-pod/allocator-serve.yaml | head -1)

# A tool counts when it answers `info`: a docker CLI without a daemon
# cannot build.
tool=${TOOL:-} unusable=()
if [ -z "$tool" ]; then
  for t in docker podman nerdctl; do
    command -v "$t" >/dev/null || continue
    if "$t" info >/dev/null 2>&1; then tool=$t; break; fi
    unusable+=("$t")
  done
fi
if [ -z "$tool" ]; then
  cat >&2 <<EOF
image: no usable container tool here (docker, podman or nerdctl${unusable[*]:+; found ${unusable[*]}, but its info fails: no daemon?}); nothing built.
Build the image on a machine with one, from this checkout:
  docker build -t $ref .
and put it on each node that runs it, e.g. for containerd (kubeadm):
  docker save $ref | ssh NODE sudo ctr -n k8s.io images import -
or with kind: kind load docker-image $ref
Or build the binary alone, as the image does:
  CGO_ENABLED=0 go build -trimpath -o allocator ./cmd/allocator
EOF
  exit 2
fi

echo "image: building $ref with $tool" >&2
case $tool in
  # nerdctl builds into containerd's k8s.io namespace, where the kubelet
  # finds images.
  nerdctl) nerdctl --namespace k8s.io build -t "$ref" . ;;
  *) "$tool" build -t "$ref" . ;;
esac

echo "$ref"
if [ "$ref" != "$deployed" ]; then
  cat >&2 <<EOF
image: deploy/ names $deployed; to run this build, point the manifests at it:
  sed -i 's|image: ${deployed%:*}:.*|image: $ref|' deploy/*.yaml deploy/jobs/*.yaml deploy/static-pod/*.yaml
EOF
fi
if [ "$tool" != nerdctl ]; then
  echo "image: a kubeadm node's containerd does not see $tool's images: ${tool} save $ref | sudo ctr -n k8s.io images import -" >&2
fi
