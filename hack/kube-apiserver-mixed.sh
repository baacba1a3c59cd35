#!/usr/bin/env bash
# Runs a REAL kube-apiserver beside `allocator serve` on one etcd, loads both
# with Service creates at the same time, and checks the invariants
# (test/mixed): no duplicate ClusterIP, every acknowledged create stored, and
# after one repair pass every Service IP held by its own IPAddress and, when
# a bitmap exists, by its bit. One JSON line per scenario; exit 1 when any
# scenario violates an invariant.
#
#   hack/kube-apiserver-mixed.sh                     all four scenarios
#   SCENARIOS="1.32:ipaddress" CREATES=600 hack/kube-apiserver-mixed.sh
#
# A scenario is KUBE_MINOR:OUR_MODEL: 1.32:ipaddress (kube-apiserver bitmap +
# ours IPAddress), 1.33:bitmap (kube-apiserver IPAddress model with its bitmap
# dual write + ours bitmap), and the same-model baselines 1.32:bitmap and
# 1.33:ipaddress. kube-apiserver is built once from the published
# k8s.io/kubernetes module (hack/lib/kube-apiserver-build.sh) and cached under
# ${XDG_CACHE_HOME:-~/.cache}/allocator/kube-apiserver; CI does not run this.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/kube-apiserver-run.sh

SCENARIOS=${SCENARIOS:-1.32:ipaddress 1.33:bitmap 1.32:bitmap 1.33:ipaddress}
CREATES=${CREATES:-1200}          # creates through each server
CLIENTS=${CLIENTS:-32}            # split evenly across the two servers
RANGE=${RANGE:-10.96.0.0/20}      # 4,094 addresses: 2,400 creates fill most of it
KUBE_132=${KUBE_132:-v1.32.13}
KUBE_133=${KUBE_133:-v1.33.13}
TYPE=${TYPE:-ClusterIP}           # or NodePort: two node ports per Service (80/TCP, 53/TCP+UDP shared),
                                  # so at most ~650 creates per server fit the default node-port range
RESULTS=${RESULTS:-}              # also append the JSON lines to this file
KEEP=${KEEP:-}                    # non-empty: keep the logs and data (path printed at the end)
OURS_FIRST=${OURS_FIRST:-}        # non-empty: start ours before kube-apiserver (it then writes the
                                  # default ServiceCIDR and the kubernetes Service's IPAddress first)

work=$(mktemp -d)
pids=()
cleanup() {
  stop_pids "${pids[@]}"
  pids=()
}
finish() {
  cleanup
  if [ -n "$KEEP" ]; then echo "logs and data kept in $work" >&2; else rm -rf "$work"; fi
}
trap finish EXIT


# wait_for WHAT CMD...: retry_for with the scenario's logs.
wait_for() { retry_for "$1" "$dir" "${@:2}"; }

# not_ready WHAT: the scenario's JSON line when a server never got ready.
not_ready() {
  printf '{"phase":"start","scenario":"%s","ok":false,"error":"%s not ready after 120s (logs: %s)"}\n' \
    "kube-apiserver-$minor+ours-$model" "$1" "$dir" | tee -a "$dir/summary.jsonl"
  [ -z "$RESULTS" ] || cat "$dir/summary.jsonl" >>"$RESULTS"
  failed=1
  cleanup
}

echo "building: allocator, etcdserver, mixed (kube-apiserver only when not cached)" >&2
go build -o "$work/allocator" ./cmd/allocator
go build -o "$work/etcdserver" ./test/tools/etcdserver
go build -o "$work/mixed" ./test/mixed

# Credentials shared by every kube-apiserver run.
kas_credentials "$work"

start_kas() {
  kas_start "$kas" "$etcd_url" "$work" "$dir" "$RANGE"
  pids+=("$kas_pid")
  wait_for kube-apiserver kubectl --kubeconfig "$dir/kas.kubeconfig" get --raw /readyz || { not_ready kube-apiserver; return 1; }
}

start_ours() {
  "$work/allocator" serve --etcd-servers "$etcd_url" --data-dir "$dir/ours" --secure-port 0 \
    --allocator "$model" --service-cluster-ip-range "$RANGE" >"$dir/ours.log" 2>&1 &
  pids+=($!)
  ours_kc="$dir/ours/admin.kubeconfig"
  wait_for "allocator serve" kubectl --kubeconfig "$ours_kc" get --raw /readyz || { not_ready "allocator serve"; return 1; }
}

failed=0
for scenario in $SCENARIOS; do
  minor=${scenario%%:*}
  model=${scenario##*:}
  case $minor in
    1.32) kas=$(hack/lib/kube-apiserver-build.sh "$KUBE_132") ;;
    1.33) kas=$(hack/lib/kube-apiserver-build.sh "$KUBE_133") ;;
    *) echo "unknown kube-apiserver minor $minor" >&2; exit 2 ;;
  esac
  dir="$work/$minor-$model"
  mkdir -p "$dir"
  started=$(date +%s)

  "$work/etcdserver" >"$dir/etcd.out" 2>"$dir/etcd.log" &
  pids+=($!)
  wait_for etcd grep -q '^ready ' "$dir/etcd.out" || { not_ready etcd; continue; }
  etcd_url=$(sed -n 's/^ready //p' "$dir/etcd.out")

  if [ -n "$OURS_FIRST" ]; then
    start_ours || continue
    start_kas || continue
  else
    start_kas || continue
    start_ours || continue
  fi

  servers="kas=$dir/kas.kubeconfig,ours=$ours_kc"
  "$work/mixed" load --scenario "kube-apiserver-$minor+ours-$model" --servers "$servers" \
    --clients "$CLIENTS" --creates "$CREATES" --type "$TYPE" --acks "$dir/acks.jsonl" | tee -a "$dir/summary.jsonl"

  # The same check before any repair pass: how far the records drifted under
  # load (informational; only the check after repair decides).
  "$work/mixed" check --phase before-repair --scenario "kube-apiserver-$minor+ours-$model" --servers "$servers" \
    --etcd-servers "$etcd_url" --acks "$dir/acks.jsonl" | tee -a "$dir/summary.jsonl" || true

  # One repair pass of each model (each fixes its own records; exit 2 means
  # problems only a person can resolve, such as two Services on one IP).
  repair_rc=""
  for m in ipaddress bitmap; do
    rc=0
    "$work/allocator" repair --kubeconfig "$ours_kc" --etcd-servers "$etcd_url" --model "$m" -o json \
      >"$dir/repair-$m.json" 2>"$dir/repair-$m.log" || rc=$?
    repair_rc="$repair_rc$m=$rc "
  done
  echo "repair exit codes: $repair_rc" >&2

  rc=0
  "$work/mixed" check --scenario "kube-apiserver-$minor+ours-$model" --servers "$servers" \
    --etcd-servers "$etcd_url" --acks "$dir/acks.jsonl" | tee -a "$dir/summary.jsonl" || rc=$?
  [ "$rc" = 0 ] || failed=1
  echo "scenario kube-apiserver-$minor+ours-$model: $(( $(date +%s) - started ))s" >&2
  [ -z "$RESULTS" ] || cat "$dir/summary.jsonl" >>"$RESULTS"
  cleanup
done
exit "$failed"
