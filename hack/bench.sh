#!/usr/bin/env bash
# Benchmark: starts `allocator serve` (embedded etcd on loopback, temporary
# data dir), then creates and deletes COUNT ClusterIP Services with client-go
# at each concurrency level, printing services/s and p50/p99 latency per phase
# and checking every Service got a distinct IP.
#
#   hack/bench.sh                         bitmap model, 2000 Services, 1/8/32 clients
#   ALLOCATOR=ipaddress COUNT=500 CONCURRENCY=8 hack/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ALLOCATOR=${ALLOCATOR:-bitmap}
COUNT=${COUNT:-2000}
CONCURRENCY=${CONCURRENCY:-1,8,32}

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
go build -o "$work/bench" ./test/bench

kc="$work/data/admin.kubeconfig"
"$work/allocator" serve --data-dir "$work/data" --secure-port 0 --service-cluster-ip-range 10.96.0.0/16 \
  --allocator "$ALLOCATOR" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
  if [ -f "$kc" ] && kubectl --kubeconfig "$kc" get --raw /readyz >/dev/null 2>&1; then break; fi
  kill -0 "$server_pid" 2>/dev/null || { tail -20 "$work/server.log"; echo "server exited" >&2; exit 1; }
  sleep 0.2
done

echo "allocator=$ALLOCATOR count=$COUNT concurrency=$CONCURRENCY ($(nproc) CPUs)"
"$work/bench" --kubeconfig "$kc" --count "$COUNT" --concurrency "$CONCURRENCY"
