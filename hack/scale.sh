#!/usr/bin/env bash
# Scale (KEP-1880's "O(10K) Services and O(1K) ranges"): starts a
# dual-stack IPAddress-model `allocator serve` (embedded etcd, temporary data
# dir, default ServiceCIDR V4_RANGE,V6_RANGE), creates CIDRS ServiceCIDRs
# (V4_CIDRS IPv4 /24s, the rest IPv6 /112s) and then SERVICES Services (one
# in V6_EVERY IPv6, ten by default) at CONCURRENCY clients while
# ServiceCIDRs are added and deleted, and prints: the create rate, latency
# and CPU per create for each tenth of the IPv4 space filled; the server's
# memory; etcd's database size; the time from start to ready with every
# Service stored; and one `allocator repair` pass through the API, and one
# given etcd (--data-dir: the job reads the objects from etcd).
#
# It ends with a summary table: Services, ServiceCIDRs, the server's RSS
# (etcd included: it runs in the server's process) after the creates, at
# ready after the restart and 10 s later, in total and per Service, and its
# peak since the restart; the Go heap in use and live; etcd's database file; the start-up
# to ready; the create rate at the last whole tenth of the fill against
# the first; the two repair passes; and the first page of a paged list.
#
#   hack/scale.sh                                            1,000 ranges, 100,000 Services (a few minutes)
#   CIDRS=100 V4_CIDRS=40 SERVICES=10000 hack/scale.sh       a tenth of it (half a minute): the smoke form CI can run;
#       like every form, it fails on a failed create, a duplicate ClusterIP or a repair pass that finds a problem
#       (its figures are no timings to compare). CHURN=0 turns the ServiceCIDR churn off (CHURN=2s: its interval)
#   V4_RANGE=10.96.0.0/12 CIDRS=10000 SERVICES=1000000 READY_TIMEOUT=600 hack/scale.sh
#       the million: the default ServiceCIDR's IPv4 range a /12 (V4_RANGE; V6_RANGE is its IPv6 one, fd00::/112)
#       and 10,000 ServiceCIDRs, all IPv6 /112s (V4_CIDRS defaults to 0 with V4_RANGE; IPv4 /24s placed after the
#       /12 when asked for). 900,000 IPv4 Services fill the /12 to 85.8%, so the rate ratio is of 70–80% to 0–10%;
#       SERVICES=1050000 fills it to 90.1% (80–90% whole), V6_EVERY=20 (one in twenty IPv6) to 90.6%
#   RUNS=3 hack/scale.sh                                     three runs, each on a fresh server, then what they
#       agree on: each run's rate ratio (ninth tenth / first) and the median, and the CPU per create in the
#       first and the last whole tenth averaged over the runs (one run's ratio moves by ±0.15 on a 2-core machine)
#   PAIRED=1 hack/scale.sh                                   also, right after the creates: the filled server deletes
#       the last BURST=10000 Services, then it and a second, empty server with the same ServiceCIDRs take bursts
#       of BURST creates in turn (PAIRS=6 rounds, ABBA order), each deleted after it: the ninth tenth of the fill
#       against the first with the machine's drift paired away, and the garbage collection charged by allocation
#       (test/scale/paired.go); the restart's figures then follow that extra history. PAIRED_PROFILES=DIR also
#       saves a CPU profile of each burst's server into DIR
#   PAIRED_DATA=/tmp/scale-data PAIRS=4 V4_RANGE=10.96.0.0/12 CIDRS=10000 SERVICES=1000000 hack/scale.sh
#       the paired bursts alone, the filled server on a copy of a data dir an earlier run kept (KEEP_DATA, with
#       the same V4_RANGE, CIDRS and SERVICES): minutes instead of the fill's half hour, to compare builds
#       (ALLOCATOR_BIN) or settings (GOGC in the environment reaches both servers) alternately
#   HEAP_PROFILE=/tmp/heap.pprof hack/scale.sh               also saves the server's heap profile right after the
#       creates (/tmp/heap.pprof.creates) and after the restart (/tmp/heap.pprof), each taken after a garbage
#       collection (gc=1), so that it holds what is live then; read them with
#       go tool pprof -top -sample_index=inuse_space /tmp/heap.pprof.bin /tmp/heap.pprof
#   KEEP_DATA=/tmp/scale-data hack/scale.sh                   also keeps the server's data dir (its embedded etcd and
#       admin kubeconfig) at the end, moved to KEEP_DATA with the server stopped, for measuring restarts on it:
#       allocator serve --data-dir /tmp/scale-data --secure-port 0 --service-cluster-ip-range ... --allocator ipaddress
#   KUBE=v1.37.2 hack/scale.sh                                the same against a real kube-apiserver v1.37.2
#       (hack/lib/kube-apiserver-serve.sh: on the etcd ours embeds, run as a process of its own, with
#       kube-controller-manager's service-cidr-controller, which finalizes deleted ServiceCIDRs);
#       kube-apiserver's and etcd's memory are printed apart, and kube-apiserver is restarted on the
#       same etcd. The figures are kube-apiserver's and etcd's; kube-controller-manager's are printed apart.
set -euo pipefail
# The whole script is one compound command, read before any of it runs: a
# run lasts up to an hour, and bash reads a script as it goes, so an edit
# or a checkout under a running script would otherwise change what it runs.
{
cd "$(dirname "$0")/.."

CIDRS=${CIDRS:-1000}
if [ -n "${V4_RANGE:-}" ]; then V4_CIDRS=${V4_CIDRS:-0}; else V4_CIDRS=${V4_CIDRS:-392}; fi
V4_RANGE=${V4_RANGE:-10.96.0.0/24}
V6_RANGE=${V6_RANGE:-fd00::/112}
V6_EVERY=${V6_EVERY:-10}
SERVICES=${SERVICES:-100000}
CONCURRENCY=${CONCURRENCY:-32}
CHURN=${CHURN:-2s}
args=(--service-cluster-ip-range "$V4_RANGE,$V6_RANGE" --allocator ipaddress)
scale_args=(--cidrs "$CIDRS" --v4-cidrs "$V4_CIDRS" --services "$SERVICES" --concurrency "$CONCURRENCY"
  --default-v4-range "$V4_RANGE" --v6-every "$V6_EVERY" --churn "$CHURN")

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

# The restart's stop writes the warm-start files: seconds at a million
# Services; one killed first leaves none, and the restart lists.
export STOP_TIMEOUT=${STOP_TIMEOUT:-120}
. hack/lib/serve.sh
go build -o "$work/scale" ./test/scale
serve_build
ms_since() { echo "$(( ($(date +%s%N) - $1) / 1000000 ))"; }
since() { echo "$(ms_since "$1") ms"; }
# rss_kib PID... sums the processes' resident memory, in KiB.
rss_kib() { for p in "$@"; do awk '/^VmRSS:/ {print $2}' "/proc/$p/status"; done | awk '{ s += $1 } END { print s }'; }
rss() { echo "$(( $(rss_kib "$1") >> 10 )) MiB"; }
# rss_parts PID: its resident memory split into anonymous (the Go heap and
# stacks, etcd's included) and file-backed (etcd's mmap of its database,
# the binary).
rss_parts() { awk '/^RssAnon:/ { a = $2 } /^RssFile:/ { f = $2 } END { printf "anonymous %d MiB, file-backed %d MiB", a / 1024, f / 1024 }' "/proc/$1/status"; }
# go_heap prints the server's Go heap in use, in MiB, from its /metrics.
go_heap() { kubectl --kubeconfig "$kc" get --raw /metrics 2>/dev/null | awk '$1 == "go_memstats_heap_inuse_bytes" { printf "%d MiB", $2 / 1048576 }' || true; }
# live_heap [FILE] makes the server collect its garbage (the heap
# profile's gc=1; the profile goes to FILE when given) and prints the bytes
# of its heap objects then, in MiB: the live heap, which the heap in use
# exceeds by the garbage the collector lets grow (GOGC) and by
# fragmentation.
live_heap() {
  kubectl --kubeconfig "$kc" get --raw '/debug/pprof/heap?gc=1' >"${1:-/dev/null}" || true
  kubectl --kubeconfig "$kc" get --raw /metrics 2>/dev/null | awk '$1 == "go_memstats_heap_alloc_bytes" { printf "%d MiB", $2 / 1048576 }' || true
}
# peak_rss_kib PID: the process's resident high-water mark, in KiB.
peak_rss_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
# page_ms PATH: the milliseconds kubectl takes to get the first page of
# 500 objects of the list at PATH (its own start included).
page_ms() { local t; t=$(date +%s%N); kubectl --kubeconfig "$kc" get --raw "$1?limit=500" >/dev/null; ms_since "$t"; }
# per_service KIB: KiB per Service, one decimal.
per_service() { awk -v k="$1" -v n="$SERVICES" 'BEGIN { printf "%.1f KiB/Service", k / n }'; }

# summary prints the run's figures as one table (what was not measured
# is "-"), from the summary_* variables and the scale command's output.
summary() {
  local ratio fill
  ratio=$(grep -h 'rate in the last whole tenth filled' "$work/scale.out" | sed 's/.*: //' || true)
  fill=$(grep -h '^IPv4 fill reached' "$work/scale.out" | sed 's/^IPv4 fill reached: //' || true)
  echo "=== summary: $SERVICES Services (one in $V6_EVERY IPv6), $CIDRS ServiceCIDRs ($V4_CIDRS IPv4 /24, the rest IPv6 /112) and the default $V4_RANGE,$V6_RANGE; $(nproc) CPUs"
  {
    printf 'IPv4 fill reached\t%s\n' "${fill:--}"
    printf 'RSS after the creates (%s)\t%d MiB\t%s\t%s\n' "$summary_who" "$((summary_rss_creates >> 10))" "$(per_service "$summary_rss_creates")" "${summary_parts_creates:--}"
    if [ -n "${summary_rss_restart:-}" ]; then
      printf 'RSS after the restart (%s)\t%d MiB\t%s\t%s\n' "$summary_who" "$((summary_rss_restart >> 10))" "$(per_service "$summary_rss_restart")" "${summary_parts_restart:--}"
    fi
    if [ -n "${summary_rss_settled:-}" ]; then
      printf 'RSS 10 s after ready, the start-up garbage returned\t%d MiB\t%s\n' "$((summary_rss_settled >> 10))" "$(per_service "$summary_rss_settled")"
    fi
    if [ -n "${summary_peak_restart:-}" ]; then
      printf 'peak RSS since the restart, at the end\t%d MiB\t%s\n' "$((summary_peak_restart >> 10))" "$(per_service "$summary_peak_restart")"
    fi
    printf 'Go heap in use, then live after a GC, after the creates\t%s\t%s\n' "${summary_heap_creates:--}" "${summary_live_creates:--}"
    printf 'Go heap in use, then live after a GC, after the restart\t%s\t%s\n' "${summary_heap_restart:--}" "${summary_live_restart:--}"
    printf 'etcd database file\t%d MiB\t%s\n' "$((summary_db_kib >> 10))" "$(per_service "$summary_db_kib")"
    printf 'ready after the restart\t%s\n' "${summary_ready:--}"
    printf 'create rate, last whole tenth / first\t%s\n' "${ratio:--}"
    printf 'one repair pass (--dry-run)\t%s\n' "${summary_repair:--}"
    printf 'one repair pass reading etcd (--dry-run --data-dir)\t%s\n' "${summary_repair_etcd:--}"
    printf 'first page of 500 (kubectl get --raw)\t%s\n' "${summary_page:--}"
  } | awk -F '\t' '{ printf "%-56s", $1; for (i = 2; i < NF; i++) printf "  %-18s", $i; printf "  %s\n", $NF }'
}

if [ -n "$KUBE" ]; then
  . hack/lib/kube-apiserver-serve.sh
  t0=$(date +%s%N)
  upstream_start "$KUBE" "$V4_RANGE,$V6_RANGE"
  echo "kube-apiserver $KUBE ready with its default ServiceCIDR in $(since "$t0") ($(nproc) CPUs)"
  "$work/scale" --kubeconfig "$kc" "${scale_args[@]}" --pids "$upstream_kas_pid,$upstream_etcd_pid" | tee "$work/scale.out"
  echo "RSS after the creates: kube-apiserver $(rss "$upstream_kas_pid"), etcd $(rss "$upstream_etcd_pid"), kube-controller-manager $(rss "$upstream_kcm_pid")"
  summary_who="kube-apiserver+etcd"
  summary_rss_creates=$(rss_kib "$upstream_kas_pid" "$upstream_etcd_pid")
  summary_db_kib=$(( $(stat -c %s "$work/upstream/etcd/etcd/member/snap/db") >> 10 ))
  echo "etcd database file: $((summary_db_kib >> 10)) MiB"
  t0=$(date +%s%N)
  upstream_restart_apiserver
  echo "kube-apiserver restarted on the same etcd, /readyz ok in $(since "$t0")"
  # A list at resourceVersion 0 is served from the watch cache, once it holds every Service.
  kubectl --kubeconfig "$kc" get --raw '/api/v1/services?limit=1&resourceVersion=0' >/dev/null
  kubectl --kubeconfig "$kc" get --raw '/apis/networking.k8s.io/v1/ipaddresses?limit=1&resourceVersion=0' >/dev/null
  summary_ready="$(since "$t0") (watch caches filled)"
  echo "... and its watch caches of Services and IPAddresses filled in $(since "$t0")"
  echo "RSS after the restart: kube-apiserver $(rss "$upstream_kas_pid"), etcd $(rss "$upstream_etcd_pid")"
  summary_rss_restart=$(rss_kib "$upstream_kas_pid" "$upstream_etcd_pid")
  summary_page="Services $(page_ms /api/v1/services) ms, IPAddresses $(page_ms /apis/networking.k8s.io/v1/ipaddresses) ms"
  summary
  exit 0
fi
# paired_bursts starts a second, empty server (the same flags, its own data
# dir and port) and runs the paired comparison between the running server
# and it (test/scale/paired.go).
paired_bursts() {
  "$work/allocator" serve --data-dir "$work/data0" --secure-port 0 "${args[@]}" >>"$work/server0.log" 2>&1 &
  empty_pid=$!
  trap 'kill -KILL "$empty_pid" 2>/dev/null || true; serve_cleanup' EXIT
  serve_wait "$work/data0/admin.kubeconfig" "$empty_pid" "$work/server0.log"
  "$work/scale" --kubeconfig "$kc" --pids "$server_pid" --compare-with "$work/data0/admin.kubeconfig" --compare-pids "$empty_pid" \
    "${scale_args[@]}" --pairs "${PAIRS:-6}" --burst "${BURST:-10000}" ${PAIRED_PROFILES:+--profile-dir "$PAIRED_PROFILES"}
  echo "RSS after the paired bursts: filled server $(rss "$server_pid"), empty server $(rss "$empty_pid")"
  kill -TERM "$empty_pid"
  wait "$empty_pid" || true
}

if [ -n "${PAIRED_DATA:-}" ]; then
  # The paired comparison alone, the filled server on a copy of a kept
  # data dir (its admin kubeconfig names the port it had then).
  cp -a "$PAIRED_DATA" "$work/data"
  rm -f "$kc"
  t0=$(date +%s%N)
  serve_start "${args[@]}"
  echo "server on a copy of $PAIRED_DATA ready in $(since "$t0") ($(nproc) CPUs)"
  paired_bursts
  exit 0
fi

t0=$(date +%s%N)
serve_start "${args[@]}"
echo "empty server ready in $(since "$t0") ($(nproc) CPUs)"
"$work/scale" --kubeconfig "$kc" "${scale_args[@]}" --pids "$server_pid" | tee "$work/scale.out"
summary_who="server+etcd"
summary_rss_creates=$(rss_kib "$server_pid")
summary_parts_creates=$(rss_parts "$server_pid")
summary_heap_creates=$(go_heap)
summary_live_creates=$(live_heap ${HEAP_PROFILE:+"$HEAP_PROFILE.creates"})

db=$(find "$work/data" -path '*/member/snap/db' | head -1)
summary_db_kib=$(( $(stat -c %s "$db") >> 10 ))
echo "etcd database file: $((summary_db_kib >> 10)) MiB"

if [ -n "${PAIRED:-}" ]; then
  paired_bursts
fi

t0=$(date +%s%N)
serve_stop
echo "server stopped in $(since "$t0") (SIGTERM; its warm-start files written)"
log_from=$(( $(wc -l <"$work/server.log") + 1 ))
t0=$(date +%s%N)
serve_start "${args[@]}"
summary_ready=$(since "$t0")
echo "start-up to ready with every Service stored: $summary_ready"
echo "server RSS after the restart: $(rss "$server_pid")"
summary_rss_restart=$(rss_kib "$server_pid")
summary_parts_restart=$(rss_parts "$server_pid")
# At ready the start-up's heap is at its peak (until the start-up is over it
# collects only when the heap reaches a size set by etcd's database file,
# internal/app/gc.go); it returns that garbage then.
sleep 10
# The start-up's steps, as the server logged them (its end is logged just
# after /readyz's first success, so they are read once the wait is over).
echo "the start-up's steps:"
tail -n +"$log_from" "$work/server.log" | grep -E 'listening on|Embedded etcd serving|warm-start file|allocator ready|Bootstrap|Carried|repair pass|first pass|Start-up over' | cut -c1-220 || true
summary_rss_settled=$(rss_kib "$server_pid")
echo "server RSS 10 s later: $(rss "$server_pid")"
summary_heap_restart=$(go_heap)
summary_live_restart=$(live_heap ${HEAP_PROFILE:+"$HEAP_PROFILE"})
if [ -n "${HEAP_PROFILE:-}" ]; then
  cp "$work/allocator" "$HEAP_PROFILE.bin"
  echo "heap profile: $HEAP_PROFILE (binary: $HEAP_PROFILE.bin)"
fi

t0=$(date +%s%N)
rc=0
"$work/allocator" repair --dry-run --model ipaddress --kubeconfig "$kc" >"$work/repair.out" 2>"$work/repair.log" || rc=$?
summary_repair="$(since "$t0"), exit $rc"
echo "one repair pass (--dry-run): $summary_repair (0: nothing to fix):"
tail -5 "$work/repair.out"
# The same pass with the job given etcd (--data-dir): it reads the objects
# from etcd at one revision instead of listing them through the server.
t0=$(date +%s%N)
"$work/allocator" repair --dry-run --model ipaddress --kubeconfig "$kc" --data-dir "$work/data" >"$work/repair-etcd.out" 2>"$work/repair-etcd.log" || rc=$?
summary_repair_etcd="$(since "$t0"), exit $rc"
echo "one repair pass reading etcd (--dry-run --data-dir): $summary_repair_etcd:"
tail -5 "$work/repair-etcd.out"
summary_page="Services $(page_ms /api/v1/services) ms, IPAddresses $(page_ms /apis/networking.k8s.io/v1/ipaddresses) ms"
summary_peak_restart=$(peak_rss_kib "$server_pid")
summary
if [ -n "${KEEP_DATA:-}" ]; then
  serve_stop
  rm -rf "$KEEP_DATA"
  mv "$work/data" "$KEEP_DATA"
  echo "data dir kept: $KEEP_DATA"
fi
exit "$rc"
}
