#!/usr/bin/env bash
# Benchmark: starts `allocator serve` (embedded etcd on loopback, temporary
# data dir), then creates and deletes COUNT ClusterIP Services with client-go
# at each concurrency level, printing services/s and p50/p99 latency per phase
# and the server's CPU per operation (its embedded etcd included), and checking
# every Service got a distinct IP.
#
#   hack/bench.sh                         bitmap model, 2000 Services, 1/8/32 clients
#   ALLOCATOR=ipaddress COUNT=500 CONCURRENCY=8 hack/bench.sh
#   TYPE=NodePort CONCURRENCY=32 hack/bench.sh       NodePort Services (a ClusterIP and a node port each)
#   ALLOCATOR=ipaddress DUAL_WRITE=1 hack/bench.sh    IPAddress model with dual write on: the data dir
#                                                     is first served by a bitmap-model server, as in an upgrade
set -euo pipefail
cd "$(dirname "$0")/.."

ALLOCATOR=${ALLOCATOR:-bitmap}
COUNT=${COUNT:-2000}
CONCURRENCY=${CONCURRENCY:-1,8,32}
TYPE=${TYPE:-ClusterIP}

. hack/lib/serve.sh
go build -o "$work/bench" ./test/bench
if [ "${DUAL_WRITE:-0}" = 1 ]; then
  serve_start --service-cluster-ip-range 10.96.0.0/16 --allocator bitmap
  serve_stop
fi
serve_start --service-cluster-ip-range 10.96.0.0/16 --allocator "$ALLOCATOR"

echo "allocator=$ALLOCATOR type=$TYPE dual-write=${DUAL_WRITE:-0} count=$COUNT concurrency=$CONCURRENCY ($(nproc) CPUs)"
"$work/bench" --kubeconfig "$kc" --count "$COUNT" --concurrency "$CONCURRENCY" --type "$TYPE" --pids "$server_pid"
