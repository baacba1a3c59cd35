#!/usr/bin/env bash
# Captures testdata/parity/<family>.json: a REAL kube-apiserver's answers to
# the parity corpus (internal/parity), one record per family configuration
# (v4, v6, v4v6, v6v4). TestParity (test/integration) replays the corpus
# against our server in both allocator models and fails on any difference.
#
#   hack/capture-parity.sh [FAMILY...]     (default: all four)
#
# kube-apiserver is built once from the published k8s.io/kubernetes module at
# the API level our /version reports (hack/lib/kube-apiserver-build.sh, ~40
# min the first time, then cached). Not run by CI: the records are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/kube-apiserver-run.sh

KUBE=${KUBE:-v1.37.2}
families=("$@")
[ ${#families[@]} -gt 0 ] || families=(v4 v6 v4v6 v6v4)
range_of() {
  case $1 in
    v4) echo 10.0.0.0/16 ;;
    v6) echo fd00:10::/108 ;;
    v4v6) echo 10.0.0.0/16,fd00:10::/108 ;;
    v6v4) echo fd00:10::/108,10.0.0.0/16 ;;
    *) echo "unknown family $1" >&2; return 1 ;;
  esac
}

work=$(mktemp -d)
pids=()
finish() {
  stop_pids "${pids[@]}"
  [ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap finish EXIT

kas=$(hack/lib/kube-apiserver-build.sh "$KUBE")
# The ServiceCIDR controller (Ready condition, deletion finalizer) runs in
# kube-controller-manager: a cluster has it, so the capture runs it too.
kcm=$(hack/lib/kube-apiserver-build.sh "$KUBE" kube-controller-manager)
go build -o "$work/etcdserver" ./test/tools/etcdserver
go build -o "$work/parity" ./test/tools/parity
kas_credentials "$work"
mkdir -p testdata/parity

for fam in "${families[@]}"; do
  range=$(range_of "$fam")
  run="$work/$fam"
  mkdir -p "$run"
  "$work/etcdserver" >"$run/etcd.out" 2>"$run/etcd.log" &
  etcd_pid=$!
  pids+=("$etcd_pid")
  retry_for etcd "$run" grep -q '^ready ' "$run/etcd.out"
  etcd_url=$(sed -n 's/^ready //p' "$run/etcd.out")
  kas_start "$kas" "$etcd_url" "$work" "$run" "$range"
  pids+=("$kas_pid")
  k=(kubectl --kubeconfig "$run/kas.kubeconfig")
  retry_for kube-apiserver "$run" "${k[@]}" get --raw /readyz
  "$kcm" --kubeconfig "$run/kas.kubeconfig" --controllers=service-cidr-controller --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=0 >"$run/kube-controller-manager.log" 2>&1 &
  kcm_pid=$!
  pids+=("$kcm_pid")
  retry_for "the kubernetes Service" "$run" "${k[@]}" -n default get service kubernetes
  retry_for "the default ServiceCIDR" "$run" "${k[@]}" wait --for=condition=Ready servicecidr/kubernetes --timeout=5s
  start=$(date +%s)
  "$work/parity" --kubeconfig "$run/kas.kubeconfig" --family "$fam" --out "testdata/parity/$fam.json" \
    --command "hack/capture-parity.sh $fam" \
    --source "kube-apiserver $KUBE (built from the k8s.io/kubernetes module), --service-cluster-ip-range=$range, default node-port range, IPAddress model (MultiCIDRServiceAllocator GA), etcd from test/tools/etcdserver; kube-controller-manager $KUBE running only service-cidr-controller"
  echo "$fam captured in $(( $(date +%s) - start ))s" >&2
  stop_pids "$kcm_pid" "$kas_pid" "$etcd_pid"
done
