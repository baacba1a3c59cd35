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
#   SCOPED=100 SCOPE_MATCH=1 ALLOCATOR=ipaddress hack/bench.sh   100 scoped ServiceCIDRs, the Services in one of them
#   CIDRS=100 LIFECYCLE=draining ALLOCATOR=ipaddress hack/bench.sh
#                                         100 more ServiceCIDRs, each draining (or manual-only), that
#                                         no create may take from (design.md §11)
#   CPU_PROFILE=/tmp/create.pprof COUNT=8000 CONCURRENCY=32 hack/bench.sh
#                                         also a CPU profile of the server (its /debug/pprof,
#                                         CPU_PROFILE_SECONDS long, default 5, from CPU_PROFILE_AFTER
#                                         into the phase, default 1s) taken during the creates, with
#                                         the creates it covers: `go tool pprof` it
#   ALLOCATOR=bitmap RANGE=10.96.0.0/12 COUNT=4000 CONCURRENCY=32 hack/bench.sh
#                                         another service range (default 10.96.0.0/16): a /12's bitmap is
#                                         128 KiB, written whole by every create
#   KUBE=v1.37.2 hack/bench.sh            the same against a real kube-apiserver v1.37.2 on the etcd ours
#                                         embeds (hack/lib/kube-apiserver-serve.sh; builds it the first
#                                         time, ~40 min): cpu-ms/op is kube-apiserver's and etcd's,
#                                         side-cpu-ms/op kube-controller-manager's
#
# Before measuring, the server is left alone for SETTLE seconds (default 10),
# so that work left over from its start-up is not counted, and its idle CPU
# over that time is printed. hack/bench-table.sh runs this in rounds and
# prints ours against kube-apiserver.
set -euo pipefail
cd "$(dirname "$0")/.."

ALLOCATOR=${ALLOCATOR:-bitmap}
COUNT=${COUNT:-2000}
CONCURRENCY=${CONCURRENCY:-1,8,32}
TYPE=${TYPE:-ClusterIP}

KUBE=${KUBE:-}
SETTLE=${SETTLE:-10}
range=${RANGE:-10.96.0.0/16}

# cpu_ticks PID...: their CPU time (user + system) in clock ticks, summed.
cpu_ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s}'; }

. hack/lib/serve.sh
go build -o "$work/bench" ./test/bench
if [ -n "$KUBE" ]; then
  . hack/lib/kube-apiserver-serve.sh
  upstream_start "$KUBE" "$range"
  pids=(--pids "$upstream_kas_pid,$upstream_etcd_pid" --side-pids "$upstream_kcm_pid")
  echo "kube-apiserver=$KUBE type=$TYPE count=$COUNT concurrency=$CONCURRENCY ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
else
  if [ "${DUAL_WRITE:-0}" = 1 ]; then
    serve_start --service-cluster-ip-range "$range" --allocator bitmap
    serve_stop
  fi
  serve_start --service-cluster-ip-range "$range" --allocator "$ALLOCATOR"
  pids=(--pids "$server_pid")
  echo "allocator=$ALLOCATOR type=$TYPE dual-write=${DUAL_WRITE:-0} count=$COUNT concurrency=$CONCURRENCY ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
fi
# apply_servicecidrs NAME FIRST COUNT ANNOTATIONS applies COUNT /20
# ServiceCIDRs NAME-0… in 10.FIRST.0.0 onwards, annotated with ANNOTATIONS
# (a YAML flow map, in which each $i is the ServiceCIDR's index).
apply_servicecidrs() {
  local name=$1 first=$2 count=$3 annotations=$4 i
  for i in $(seq 0 $(( count - 1 ))); do
    cat <<YAML
apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata:
  name: $name-$i
  annotations: ${annotations//\$i/$i}
spec: {cidrs: ["10.$(( first + i / 16 )).$(( (i % 16) * 16 )).0/20"]}
---
YAML
  done | kubectl --kubeconfig "$kc" apply -f - >/dev/null
}
# SCOPED=N (our server only): N scoped ServiceCIDRs (/20s in 10.128.0.0/9,
# namespace-selector bench-scope=sI) before the run; with SCOPE_MATCH=1 the
# benchmark's namespaces carry bench-scope=s$((N/2)), so its Services are
# routed into one of them, else they are in no scope (design.md §11).
ns_labels=()
if [ "${SCOPED:-0}" -gt 0 ]; then
  [ -z "$KUBE" ] || { echo "SCOPED is for our server only" >&2; exit 2; }
  apply_servicecidrs bench-scope 128 "$SCOPED" '{scope.allocator.github.io/namespace-selector: "bench-scope=s$i"}'
  if [ "${SCOPE_MATCH:-0}" = 1 ]; then ns_labels=(--namespace-labels "bench-scope=s$(( SCOPED / 2 ))"); fi
  echo "scoped ServiceCIDRs: $SCOPED, benchmark namespaces in one of them: ${SCOPE_MATCH:-0}"
fi
# CIDRS=N (our server only): N more ServiceCIDRs (/20s in 10.64.0.0/10),
# annotated lifecycle.allocator.github.io/$LIFECYCLE=true when LIFECYCLE is
# set (draining, manual-only), before the run.
if [ "${CIDRS:-0}" -gt 0 ]; then
  [ -z "$KUBE" ] || { echo "CIDRS is for our server only" >&2; exit 2; }
  annotations="{}"
  if [ -n "${LIFECYCLE:-}" ]; then annotations="{lifecycle.allocator.github.io/$LIFECYCLE: \"true\"}"; fi
  apply_servicecidrs bench-extra 64 "$CIDRS" "$annotations"
  echo "more ServiceCIDRs: $CIDRS, lifecycle: ${LIFECYCLE:-none}"
fi
IFS=, read -ra measured <<<"${pids[1]}"
t0=$(cpu_ticks "${measured[@]}")
sleep "$SETTLE"
echo "idle for ${SETTLE}s before the benchmark: $(( ($(cpu_ticks "${measured[@]}") - t0) * 1000 / $(getconf CLK_TCK) / SETTLE )) ms CPU per second"
profile=()
if [ -n "${CPU_PROFILE:-}" ]; then
  profile=(--cpu-profile "$CPU_PROFILE" --cpu-profile-seconds "${CPU_PROFILE_SECONDS:-5}" --cpu-profile-after "${CPU_PROFILE_AFTER:-1s}")
fi
"$work/bench" --kubeconfig "$kc" --count "$COUNT" --concurrency "$CONCURRENCY" --type "$TYPE" "${pids[@]}" "${ns_labels[@]}" "${profile[@]}"
