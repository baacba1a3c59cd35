#!/usr/bin/env bash
# Fill curve: starts `allocator serve` (embedded etcd, temporary data dir) on a
# service range, fills it with one client through the API, and prints the
# create latency per 10% of fill.
#
#   hack/fill-curve.sh                                  IPAddress model, a /18 (16,381 Services)
#   ALLOCATOR=bitmap RANGE=10.0.0.0/20 COUNT=4093 hack/fill-curve.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ALLOCATOR=${ALLOCATOR:-ipaddress}
RANGE=${RANGE:-10.0.0.0/18}
COUNT=${COUNT:-16381}

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/allocator" ./cmd/allocator
go build -o "$work/fillcurve" ./test/fillcurve
kc="$work/data/admin.kubeconfig"
"$work/allocator" serve --data-dir "$work/data" --secure-port 0 --service-cluster-ip-range "$RANGE" --allocator "$ALLOCATOR" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  if [ -f "$kc" ] && kubectl --kubeconfig "$kc" get --raw /readyz >/dev/null 2>&1; then break; fi
  kill -0 "$server_pid" 2>/dev/null || { tail -20 "$work/server.log"; exit 1; }
  sleep 0.2
done
echo "allocator=$ALLOCATOR range=$RANGE services=$COUNT"
"$work/fillcurve" --kubeconfig "$kc" --count "$COUNT"
