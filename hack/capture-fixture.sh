#!/usr/bin/env bash
# Captures testdata/kube-apiserver-1.33-ipaddress.json: the etcd values a REAL
# kube-apiserver v1.33 writes in the IPAddress model (IPAddress and
# ServiceCIDR stored as networking.k8s.io/v1beta1, the bitmap dual-written),
# with the expected view read through its API (test/tools/capture).
#
#   hack/capture-fixture.sh [OUT]
#
# kube-apiserver is built once from the published k8s.io/kubernetes module
# (hack/lib/kube-apiserver-build.sh, ~40 min the first time, then cached).
# Not run by CI: the fixture it wrote is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/kube-apiserver-run.sh

KUBE=${KUBE:-v1.33.13}
RANGE=10.96.0.0/16
OUT=${1:-testdata/kube-apiserver-1.33-ipaddress.json}

work=$(mktemp -d)
pids=()
finish() {
  stop_pids "${pids[@]}"
  [ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap finish EXIT
retry() { for _ in $(seq 1 240); do if timeout 10 "$@" >/dev/null 2>&1; then return 0; fi; sleep 0.5; done; return 1; }

kas=$(hack/lib/kube-apiserver-build.sh "$KUBE")
go build -o "$work/etcdserver" ./test/tools/etcdserver
go build -o "$work/capture" ./test/tools/capture

"$work/etcdserver" >"$work/etcd.out" 2>"$work/etcd.log" &
pids+=($!)
retry grep -q '^ready ' "$work/etcd.out"
etcd_url=$(sed -n 's/^ready //p' "$work/etcd.out")

kas_credentials "$work"
kas_start "$kas" "$etcd_url" "$work" "$work" "$RANGE"
pids+=("$kas_pid")
cp "$work/kas.kubeconfig" "$work/kubeconfig"
k() { kubectl --kubeconfig "$work/kubeconfig" "$@"; }
retry kubectl --kubeconfig "$work/kubeconfig" get --raw /readyz || { tail -20 "$work/kube-apiserver.log" >&2; exit 1; }
retry kubectl --kubeconfig "$work/kubeconfig" get ipaddress 10.96.0.1

k create namespace fx
for i in 01 02 03 04 05 06; do k -n fx create service clusterip "dyn-$i" --tcp=80; done
k -n fx create service clusterip static-low --tcp=80 --clusterip=10.96.0.10
k -n fx create service clusterip headless --tcp=80 --clusterip=None
k apply -f - <<YAML
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: extra}
spec: {cidrs: [10.100.0.0/24]}
YAML
k -n fx create service clusterip in-extra --tcp=80 --clusterip=10.100.0.5
deleted=$(k -n fx get service dyn-06 -o jsonpath='{.spec.clusterIP}')
k -n fx delete service dyn-06
for _ in $(seq 1 120); do [ -n "$(k get ipaddress "$deleted" -o name --ignore-not-found)" ] || break; sleep 0.5; done

"$work/capture" --etcd-servers "$etcd_url" --kubeconfig "$work/kubeconfig" --out "$OUT" --bitmap-range "$RANGE" \
  --source "kube-apiserver $KUBE (built from the k8s.io/kubernetes module) against etcd from test/tools/etcdserver, --service-cluster-ip-range=$RANGE (single stack; MultiCIDRServiceAllocator GA on, DisableAllocatorDualWrite off: IPAddress and ServiceCIDR stored as networking.k8s.io/v1beta1, /registry/ranges/serviceips dual-written); plus ServiceCIDR 'extra' 10.100.0.0/24 created through the API" \
  --note "fx/dyn-06 had $deleted and was deleted before the capture: its IPAddress and its bit are gone" \
  --note "IPAddress and ServiceCIDR values are networking.k8s.io/v1beta1 (1.33 serves v1 but stores v1beta1); expect was read through the v1 API" \
  --note "fx/in-extra (10.100.0.5) is outside the bitmap's range, so only its IPAddress holds it"
echo "wrote $OUT" >&2
