#!/usr/bin/env bash
# Restarts: starts `allocator serve` again and again on a data dir a scale
# run kept (hack/scale.sh's KEEP_DATA), alternating two builds or two
# environments, and prints for each start the time to /readyz, the time
# the embedded etcd took to serve (from the log), the process's CPU, its
# peak RSS (VmHWM) at ready and how many warm-start files it started from
# (0 to 2); then each side's medians. The machine's speed
# drifts by more than most changes move a start, so only alternated starts
# compare; and the first start of a pair tends to be the faster, so the
# pairs alternate which side goes first (AB, BA, AB, ...).
#
#   DATA=/tmp/scale-data V4_RANGE=10.96.0.0/12 hack/restarts.sh A_BIN B_BIN
#       PAIRS=3 pairs (6 starts) of two builds on the data dir of a million-Service run
#   DATA=/tmp/scale-data V4_RANGE=10.96.0.0/12 A_ENV='GOGC=400' hack/restarts.sh BIN
#       one build, the environment changed on one side (B_ENV the other's)
#   DATA=/tmp/scale-data V4_RANGE=10.96.0.0/12 A_COLD=1 hack/restarts.sh BIN
#       one build, its A side starting without the warm-start files (removed
#       before each of its starts: it lists), the B side from those the stop
#       before it wrote
#
# V4_RANGE and V6_RANGE are the run's (scale.sh's defaults 10.96.0.0/24 and
# fd00::/112); the data dir keeps whatever the starts write to it.
set -euo pipefail
{
cd "$(dirname "$0")/.."

: "${DATA:?DATA is the data dir a scale run kept (KEEP_DATA)}"
[ $# -ge 1 ] || { echo "usage: DATA=dir hack/restarts.sh A_BIN [B_BIN]" >&2; exit 2; }
a_bin=$1
b_bin=${2:-$1}
PAIRS=${PAIRS:-3}
export READY_TIMEOUT=${READY_TIMEOUT:-600}
# A stop writes the warm-start files: seconds at a million Services, more
# on a slow disk. One killed first leaves none, and the next start lists.
export STOP_TIMEOUT=${STOP_TIMEOUT:-120}
ranges="${V4_RANGE:-10.96.0.0/24},${V6_RANGE:-fd00::/112}"
. hack/lib/serve.sh # serve_wait, serve_stop; $work, removed at exit
kc="$DATA/admin.kubeconfig"
log="$work/server.log"
results="$work/results"

# start SIDE BIN ENV COLD: one start to ready and its figures, then a stop;
# COLD non-empty removes the warm-start files first.
start() {
  local side=$1 bin=$2 env=$3 cold=$4 t0 t1 cpu hwm etcd warm
  rm -f "$kc" # written again by the start, with its port
  if [ -n "$cold" ]; then rm -rf "$DATA/warm-start"; fi
  t0=$(date +%s%N)
  # shellcheck disable=SC2086 # ENV is a list of VAR=value words
  env $env "$bin" serve --data-dir "$DATA" --secure-port 0 --service-cluster-ip-range "$ranges" \
    --allocator ipaddress >"$log" 2>&1 &
  server_pid=$!
  serve_wait "$kc" "$server_pid" "$log"
  t1=$(date +%s%N)
  cpu=$(awk '{ printf "%.1f", ($14 + $15) / 100 }' "/proc/$server_pid/stat")
  hwm=$(awk '/^VmHWM:/ { printf "%d", $2 / 1024 }' "/proc/$server_pid/status")
  etcd=$(grep -o '"Embedded etcd serving" took="[^"]*"' "$log" | sed -E 's/.*took="([^"]*)"/\1/' || true)
  warm=$(grep -c '"Starting from the warm-start file"' "$log" || true)
  serve_stop
  awk -v s="$side" -v r="$(( (t1 - t0) / 1000000 ))" -v c="$cpu" -v m="$hwm" -v e="${etcd:--}" -v w="$warm" \
    'BEGIN { printf "%s  ready %6.1f s  etcd serving %8s  CPU %6.1f s  peak RSS %6d MiB  warm-start files used %d\n", s, r / 1000, e, c, m, w }' | tee -a "$results"
}

for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) -eq 1 ]; then
    start A "$a_bin" "${A_ENV:-}" "${A_COLD:-}"; start B "$b_bin" "${B_ENV:-}" "${B_COLD:-}"
  else
    start B "$b_bin" "${B_ENV:-}" "${B_COLD:-}"; start A "$a_bin" "${A_ENV:-}" "${A_COLD:-}"
  fi
done

echo "A: $a_bin ${A_ENV:-}${A_COLD:+ (no warm-start files)}"
echo "B: $b_bin ${B_ENV:-}${B_COLD:+ (no warm-start files)}"
for side in A B; do
  awk -v s="$side" '$1 == s { r[++n] = $3; c[n] = $9; m[n] = $13 }
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    END { printf "%s medians: ready %.1f s, CPU %.1f s, peak RSS %d MiB (%d starts)\n", s, median(r, n), median(c, n), median(m, n), n }' "$results"
done
exit 0
}
