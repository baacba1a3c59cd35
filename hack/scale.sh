#!/usr/bin/env bash
# Scale (issue 19, KEP-1880's "O(10K) Services and O(1K) ranges"): starts a
# dual-stack IPAddress-model `allocator serve` (embedded etcd, temporary data
# dir), creates CIDRS ServiceCIDRs (V4_CIDRS IPv4 /24s, the rest IPv6 /112s)
# and then SERVICES Services (one in ten IPv6) at CONCURRENCY clients while
# ServiceCIDRs are added and deleted, and prints: the create rate, latency
# and CPU per create for each tenth of the IPv4 space filled; the server's
# memory; etcd's database size; the time from start to ready with every
# Service stored; and one `allocator repair` pass.
#
#   hack/scale.sh                                            1,000 ranges, 100,000 Services (a few minutes)
#   CIDRS=100 V4_CIDRS=40 SERVICES=10000 hack/scale.sh       a tenth of it
#   HEAP_PROFILE=/tmp/heap.pprof hack/scale.sh               also saves the restarted server's heap profile
set -euo pipefail
cd "$(dirname "$0")/.."

CIDRS=${CIDRS:-1000}
V4_CIDRS=${V4_CIDRS:-392}
SERVICES=${SERVICES:-100000}
CONCURRENCY=${CONCURRENCY:-32}
args=(--service-cluster-ip-range 10.96.0.0/24,fd00::/112 --allocator ipaddress)

. hack/lib/serve.sh
go build -o "$work/scale" ./test/scale
serve_build
since() { echo "$(( ($(date +%s%N) - $1) / 1000000 )) ms"; }
t0=$(date +%s%N)
serve_start "${args[@]}"
echo "empty server ready in $(since "$t0") ($(nproc) CPUs)"
"$work/scale" --kubeconfig "$kc" --cidrs "$CIDRS" --v4-cidrs "$V4_CIDRS" --services "$SERVICES" \
  --concurrency "$CONCURRENCY" --pids "$server_pid"

db=$(find "$work/data" -path '*/member/snap/db' | head -1)
echo "etcd database file: $(( $(stat -c %s "$db") >> 20 )) MiB"

serve_stop
log_from=$(( $(wc -l <"$work/server.log") + 1 ))
t0=$(date +%s%N)
serve_start "${args[@]}"
echo "start-up to ready with every Service stored: $(since "$t0"); the start-up's steps:"
tail -n +"$log_from" "$work/server.log" | grep -E 'listening on|Bootstrap|Carried|repair pass|first pass' | cut -c1-220 || true
echo "server RSS after the restart: $(( $(awk '/^VmRSS:/ {print $2}' "/proc/$server_pid/status") >> 10 )) MiB"
if [ -n "${HEAP_PROFILE:-}" ]; then
  kubectl --kubeconfig "$kc" get --raw /debug/pprof/heap >"$HEAP_PROFILE"
  cp "$work/allocator" "$HEAP_PROFILE.bin"
  echo "heap profile: $HEAP_PROFILE (binary: $HEAP_PROFILE.bin)"
fi

t0=$(date +%s%N)
rc=0
"$work/allocator" repair --dry-run --model ipaddress --kubeconfig "$kc" >"$work/repair.out" 2>"$work/repair.log" || rc=$?
echo "one repair pass (--dry-run): $(since "$t0"), exit $rc (0: nothing to fix):"
tail -5 "$work/repair.out"
