#!/usr/bin/env bash
# Scale (KEP-1880's "O(10K) Services and O(1K) ranges"): starts a
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
#   RUNS=3 hack/scale.sh                                     three runs, each on a fresh server, then what they
#       agree on: each run's rate ratio (ninth tenth / first) and the median, and the CPU per create in the
#       first and the last whole tenth averaged over the runs (one run's ratio moves by ±0.15 on a 2-core machine)
#   PAIRED=1 hack/scale.sh                                   also, right after the creates: the filled server deletes
#       the last BURST=10000 Services, then it and a second, empty server with the same ServiceCIDRs take bursts
#       of BURST creates in turn (PAIRS=6 rounds, ABBA order), each deleted after it: the ninth tenth of the fill
#       against the first with the machine's drift paired away, and the garbage collection charged by allocation
#       (test/scale/paired.go); the restart's figures then follow that extra history. PAIRED_PROFILES=DIR also
#       saves a CPU profile of each burst's server into DIR
#   HEAP_PROFILE=/tmp/heap.pprof hack/scale.sh               also saves the server's heap profile right after the
#       creates (/tmp/heap.pprof.creates) and after the restart (/tmp/heap.pprof)
#   KUBE=v1.37.2 hack/scale.sh                                the same against a real kube-apiserver v1.37.2
#       (hack/lib/kube-apiserver-serve.sh: on the etcd ours embeds, run as a process of its own, with
#       kube-controller-manager's service-cidr-controller, which finalizes deleted ServiceCIDRs);
#       kube-apiserver's and etcd's memory are printed apart, and kube-apiserver is restarted on the
#       same etcd. The figures are kube-apiserver's and etcd's; kube-controller-manager's are printed apart.
set -euo pipefail
cd "$(dirname "$0")/.."

CIDRS=${CIDRS:-1000}
V4_CIDRS=${V4_CIDRS:-392}
SERVICES=${SERVICES:-100000}
CONCURRENCY=${CONCURRENCY:-32}
args=(--service-cluster-ip-range 10.96.0.0/24,fd00::/112 --allocator ipaddress)

KUBE=${KUBE:-}
RUNS=${RUNS:-1}

if [ "$RUNS" -gt 1 ]; then
  runs=$(mktemp -d)
  trap 'rm -rf "$runs"' EXIT
  bin=${ALLOCATOR_BIN:-}
  if [ -z "$bin" ] && [ -z "$KUBE" ]; then
    go build -o "$runs/allocator" ./cmd/allocator
    bin=$runs/allocator
  fi
  for i in $(seq 1 "$RUNS"); do
    echo "=== run $i of $RUNS"
    RUNS=1 ALLOCATOR_BIN=$bin "$0" | tee "$runs/run$i.txt"
  done
  echo "=== $RUNS runs"
  # A table row is "  80–90%  creates  per-sec  p50  p99  cpu-ms/op"; a
  # whole tenth spans ten points.
  for f in "$runs"/run*.txt; do
    awk '$1 ~ /^[0-9]+–[0-9]+%$/ { split($1, b, "–"); if (b[2] + 0 - b[1] == 10) { if (first == "") first = $6; last = $6 } }
      /rate in the last whole tenth filled/ { ratio = $NF }
      END { printf "%s %s %s\n", ratio, first, last }' "$f"
  done | sort -n | awk '{ ratio[NR] = $1; first += $2; last += $3 }
    END {
      for (i = 1; i <= NR; i++) list = list (i > 1 ? ", " : "") ratio[i]
      median = (NR % 2) ? ratio[(NR + 1) / 2] : (ratio[NR / 2] + ratio[NR / 2 + 1]) / 2
      printf "rate ratio (last whole tenth / first), the runs sorted: %s; median %.2f\n", list, median
      printf "CPU per create averaged over the runs: first tenth %.2f ms, last whole tenth %.2f ms (%+.0f%%)\n", first / NR, last / NR, (last / first - 1) * 100
    }'
  grep -hE '^paired (rate ratio|CPU per create)' "$runs"/run*.txt || true
  exit 0
fi

. hack/lib/serve.sh
go build -o "$work/scale" ./test/scale
serve_build
since() { echo "$(( ($(date +%s%N) - $1) / 1000000 )) ms"; }
rss() { echo "$(( $(awk '/^VmRSS:/ {print $2}' "/proc/$1/status") >> 10 )) MiB"; }

if [ -n "$KUBE" ]; then
  . hack/lib/kube-apiserver-serve.sh
  t0=$(date +%s%N)
  upstream_start "$KUBE" 10.96.0.0/24,fd00::/112
  echo "kube-apiserver $KUBE ready with its default ServiceCIDR in $(since "$t0") ($(nproc) CPUs)"
  "$work/scale" --kubeconfig "$kc" --cidrs "$CIDRS" --v4-cidrs "$V4_CIDRS" --services "$SERVICES" \
    --concurrency "$CONCURRENCY" --pids "$upstream_kas_pid,$upstream_etcd_pid"
  echo "RSS after the creates: kube-apiserver $(rss "$upstream_kas_pid"), etcd $(rss "$upstream_etcd_pid"), kube-controller-manager $(rss "$upstream_kcm_pid")"
  echo "etcd database file: $(( $(stat -c %s "$work/upstream/etcd/etcd/member/snap/db") >> 20 )) MiB"
  t0=$(date +%s%N)
  upstream_restart_apiserver
  echo "kube-apiserver restarted on the same etcd, /readyz ok in $(since "$t0")"
  # A list at resourceVersion 0 is served from the watch cache, once it holds every Service.
  kubectl --kubeconfig "$kc" get --raw '/api/v1/services?limit=1&resourceVersion=0' >/dev/null
  kubectl --kubeconfig "$kc" get --raw '/apis/networking.k8s.io/v1/ipaddresses?limit=1&resourceVersion=0' >/dev/null
  echo "... and its watch caches of Services and IPAddresses filled in $(since "$t0")"
  echo "RSS after the restart: kube-apiserver $(rss "$upstream_kas_pid"), etcd $(rss "$upstream_etcd_pid")"
  exit 0
fi
t0=$(date +%s%N)
serve_start "${args[@]}"
echo "empty server ready in $(since "$t0") ($(nproc) CPUs)"
"$work/scale" --kubeconfig "$kc" --cidrs "$CIDRS" --v4-cidrs "$V4_CIDRS" --services "$SERVICES" \
  --concurrency "$CONCURRENCY" --pids "$server_pid"

if [ -n "${HEAP_PROFILE:-}" ]; then
  kubectl --kubeconfig "$kc" get --raw /debug/pprof/heap >"$HEAP_PROFILE.creates"
fi

db=$(find "$work/data" -path '*/member/snap/db' | head -1)
echo "etcd database file: $(( $(stat -c %s "$db") >> 20 )) MiB"

if [ -n "${PAIRED:-}" ]; then
  # The empty server: the same flags, its own data dir and port.
  "$work/allocator" serve --data-dir "$work/data0" --secure-port 0 "${args[@]}" >>"$work/server0.log" 2>&1 &
  empty_pid=$!
  trap 'kill -KILL "$empty_pid" 2>/dev/null || true; serve_cleanup' EXIT
  serve_wait "$work/data0/admin.kubeconfig" "$empty_pid" "$work/server0.log"
  "$work/scale" --kubeconfig "$kc" --pids "$server_pid" --compare-with "$work/data0/admin.kubeconfig" --compare-pids "$empty_pid" \
    --cidrs "$CIDRS" --v4-cidrs "$V4_CIDRS" --concurrency "$CONCURRENCY" --services "$SERVICES" --pairs "${PAIRS:-6}" --burst "${BURST:-10000}" ${PAIRED_PROFILES:+--profile-dir "$PAIRED_PROFILES"}
  kill -TERM "$empty_pid"
  wait "$empty_pid" || true
fi

serve_stop
log_from=$(( $(wc -l <"$work/server.log") + 1 ))
t0=$(date +%s%N)
serve_start "${args[@]}"
echo "start-up to ready with every Service stored: $(since "$t0"); the start-up's steps:"
tail -n +"$log_from" "$work/server.log" | grep -E 'listening on|Bootstrap|Carried|repair pass|first pass' | cut -c1-220 || true
echo "server RSS after the restart: $(rss "$server_pid")"
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
