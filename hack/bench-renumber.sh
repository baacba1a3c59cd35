#!/usr/bin/env bash
# What a renumber costs the creates running beside it. Starts `allocator
# serve` (IPAddress model, embedded etcd on loopback, temporary data dir),
# adds a ServiceCIDR "old" (10.200.0.0/20) holding MOVE Services (static
# ClusterIPs, namespace renumber-bench) and marks it draining; then creates
# and deletes COUNT ClusterIP Services at CONCURRENCY clients (test/bench)
# twice: alone, and while `allocator renumber --from old --dry-run=false`
# moves the MOVE Services. Prints both benchmark lines and the renumber's
# rate. The server's CPU per operation of the second run includes the
# renumber's own requests.
#
#   hack/bench-renumber.sh                      MOVE=2000 COUNT=2000 CONCURRENCY=32
#   MOVE=4000 COUNT=4000 hack/bench-renumber.sh
set -euo pipefail
cd "$(dirname "$0")/.."

MOVE=${MOVE:-2000}
COUNT=${COUNT:-2000}
CONCURRENCY=${CONCURRENCY:-32}
SETTLE=${SETTLE:-5}

. hack/lib/serve.sh
go build -o "$work/bench" ./test/bench
serve_start --service-cluster-ip-range 10.96.0.0/16 --allocator ipaddress
k() { kubectl --kubeconfig "$kc" "$@"; }

k apply -f - >/dev/null <<YAML
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: old}
spec: {cidrs: ["10.200.0.0/20"]}
---
apiVersion: v1
kind: Namespace
metadata: {name: renumber-bench}
YAML
k wait --for=condition=Ready servicecidr/old --timeout=60s >/dev/null
for i in $(seq 1 "$MOVE"); do
  cat <<YAML
apiVersion: v1
kind: Service
metadata: {name: moved-$i, namespace: renumber-bench}
spec: {clusterIP: 10.200.$(( i / 256 )).$(( i % 256 )), ports: [{port: 80}]}
---
YAML
done | k apply -f - >/dev/null
k annotate servicecidr old lifecycle.allocator.github.io/draining=true >/dev/null
echo "old: $MOVE Services, draining ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"

sleep "$SETTLE"
echo "== creates alone"
"$work/bench" --kubeconfig "$kc" --count "$COUNT" --concurrency "$CONCURRENCY" --pids "$server_pid"

echo "== creates while renumber moves $MOVE Services"
start=$(date +%s.%N)
"$work/allocator" renumber --kubeconfig "$kc" --from old -n renumber-bench --dry-run=false \
  --journal "$work/renumber.journal" >"$work/renumber.log" 2>&1 &
renumber_pid=$!
sleep 1
"$work/bench" --kubeconfig "$kc" --count "$COUNT" --concurrency "$CONCURRENCY" --pids "$server_pid"
renumber_running=0
kill -0 "$renumber_pid" 2>/dev/null && renumber_running=1
code=0
wait "$renumber_pid" || code=$?
took=$(echo "$(date +%s.%N) - $start" | bc)
echo "renumber: exit $code, $MOVE Services in ${took}s ($(echo "$MOVE / $took" | bc) Services/s); still running when the creates ended: $renumber_running"
tail -3 "$work/renumber.log"
left=$(k get services -n renumber-bench -o jsonpath='{range .items[*]}{.spec.clusterIP}{"\n"}{end}' | grep -c '^10\.200\.' || true)
echo "Services left in old: $left"
