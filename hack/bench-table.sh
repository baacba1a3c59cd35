#!/usr/bin/env bash
# Issue 19's comparison: our server against a real kube-apiserver, measured in
# one run on this machine with one method, printed as a markdown table.
#
#   hack/bench-table.sh                 kube-apiserver v1.37.2 if already built, else ours alone
#   KUBE=v1.37.2 hack/bench-table.sh    that kube-apiserver, built first if missing (~40 min)
#   KUBE=none hack/bench-table.sh       ours alone
#   ROUNDS=3 COUNT=1500 hack/bench-table.sh
#   OUT=/tmp/runs hack/bench-table.sh   also keeps each run's output (SERVER.ROUND) in /tmp/runs
#   FROM=/tmp/runs hack/bench-table.sh  prints the table of kept outputs again, runs nothing
#
# Each round runs hack/bench.sh (COUNT Services created then deleted at 32
# clients, then at 1) once per server, interleaved: kube-apiserver, ours with
# --allocator ipaddress, ours with --allocator bitmap. Each run starts a fresh
# server on a fresh etcd with --service-cluster-ip-range 10.96.0.0/16.
# kube-apiserver runs on the etcd ours embeds, as a process of its own
# (hack/lib/kube-apiserver-serve.sh). CPU per operation is the CPU time the
# server's processes spent during the phase (etcd included: for ours inside
# its process, for kube-apiserver its etcd process) divided by COUNT;
# kube-controller-manager's is printed apart and not counted.
#
# A cell is the median over the rounds with the lowest and highest in
# brackets; a ratio is the median of the rounds' ratios (each round's servers
# ran minutes apart), with their range. On a shared machine rates move by
# ±30% between identical runs and CPU per operation by about ±15%: compare
# CPU per operation. The raw outputs are printed first.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-2}
COUNT=${COUNT:-1500}
KUBE=${KUBE:-}
default_kube=v1.37.2

. hack/lib/serve.sh
. hack/lib/kube-apiserver-serve.sh
out=${FROM:-${OUT:-$work/out}}
mkdir -p "$out"
if [ -n "${FROM:-}" ]; then
  servers=()
  for s in upstream ipaddress bitmap; do [ -f "$out/$s.1" ] && servers+=("$s"); done
  ROUNDS=$(find "$out" -name 'ipaddress.*' | wc -l)
  COUNT=$(awk '$1 == "create" && $2 == 32 { print $3; exit }' "$out/ipaddress.1")
elif [ -z "$KUBE" ]; then
  if upstream_cached_bin "$default_kube" kube-apiserver >/dev/null &&
    upstream_cached_bin "$default_kube" kube-controller-manager >/dev/null; then
    KUBE=$default_kube
  else
    echo "no kube-apiserver $default_kube built (KUBE=$default_kube builds it, ~40 min): ours alone" >&2
    KUBE=none
  fi
fi
[ -n "${FROM:-}" ] || servers=(ipaddress bitmap)
if [ -z "${FROM:-}" ] && [ "$KUBE" != none ]; then
  # Build (or find) both binaries now, not inside the first round.
  for c in kube-apiserver kube-controller-manager; do
    hack/lib/kube-apiserver-build.sh "$KUBE" "$c" >/dev/null ||
      { echo "no $c $KUBE: hack/lib/kube-apiserver-build.sh $KUBE $c failed" >&2; exit 1; }
  done
  servers=(upstream ipaddress bitmap)
fi
[ -n "${FROM:-}" ] || serve_build # one binary of ours for every round

for round in $(seq 1 "$ROUNDS"); do
  [ -z "${FROM:-}" ] || break
  for s in "${servers[@]}"; do
    echo "== round $round: $s" >&2
    if [ "$s" = upstream ]; then
      KUBE=$KUBE COUNT=$COUNT CONCURRENCY=32,1 hack/bench.sh | tee "$out/$s.$round" >&2
    else
      KUBE= ALLOCATOR_BIN="$work/allocator" ALLOCATOR=$s COUNT=$COUNT CONCURRENCY=32,1 hack/bench.sh | tee "$out/$s.$round" >&2
    fi
  done
done

# figures SERVER: one line per round, "create32 cpu32 delete32 cpuDelete32
# create1 sideCreate32 sideDelete32 idle" (side: kube-controller-manager, or
# 0; idle: the server's CPU in ms per second before the benchmark).
figures() {
  local f
  for f in "$out/$1".*; do
    awk '$1 == "create" && $2 == 32 { c = $4; cc = $8; sc = $9 }
         $1 == "delete" && $2 == 32 { d = $4; dc = $8; sd = $9 }
         $1 == "create" && $2 == 1 { c1 = $4 }
         $1 == "idle" { idle = $(NF-4) }
         END { print c, cc, d, dc, c1, sc + 0, sd + 0, idle + 0 }' "$f"
  done
}

echo
echo "Services created, then deleted, $COUNT per phase; $(nproc) CPUs; $ROUNDS rounds; median (lowest–highest)."
echo
{
  for s in "${servers[@]}"; do
    figures "$s" | sed "s/^/$s /"
  done
} | awk -v servers="${servers[*]}" '
  function median(a, n,    i, j, t, b) {
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && b[j-1] > b[j]; j--) { t = b[j]; b[j] = b[j-1]; b[j-1] = t }
    return n % 2 ? b[(n+1)/2] : (b[n/2] + b[n/2+1]) / 2
  }
  function lo(a, n,    i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
  function hi(a, n,    i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
  # cpu: 0 a rate, 1 CPU per operation, 2 idle CPU (ms per s).
  function fmt(v, cpu) { return cpu == 1 ? sprintf("%.2f", v) : sprintf("%.0f", v) }
  function cell(s, k, cpu,    a, i) {
    for (i = 1; i <= rounds[s]; i++) a[i] = v[s, i, k]
    return fmt(median(a, rounds[s]), cpu) (rounds[s] > 1 ? " (" fmt(lo(a, rounds[s]), cpu) "–" fmt(hi(a, rounds[s]), cpu) ")" : "") (cpu == 1 ? " ms" : cpu == 2 ? "" : "/s")
  }
  # ratio: ours against upstream per round, "N×" for rates (higher is
  # better), "N× less" for CPU (upstream / ours).
  function ratio(s, k, cpu,    a, i, n, m) {
    n = rounds[s] < rounds["upstream"] ? rounds[s] : rounds["upstream"]
    for (i = 1; i <= n; i++) a[i] = cpu ? v["upstream", i, k] / v[s, i, k] : v[s, i, k] / v["upstream", i, k]
    m = median(a, n)
    r[s, k] = m
    return sprintf("%.1f×%s", m, cpu ? " less" : "") (n > 1 ? sprintf(" (%.1f–%.1f)", lo(a, n), hi(a, n)) : "")
  }
  { rounds[$1]++; for (k = 2; k <= NF; k++) v[$1, rounds[$1], k-1] = $k }
  END {
    ns = split(servers, list, " ")
    up = ("upstream" in rounds)
    names["upstream"] = "kube-apiserver"; names["ipaddress"] = "ours, IPAddress model"; names["bitmap"] = "ours, bitmap model"
    row[1] = "create rate, 32 clients"; key[1] = 1; cpu[1] = 0
    row[2] = "CPU per create, 32 clients"; key[2] = 2; cpu[2] = 1
    row[3] = "delete rate, 32 clients"; key[3] = 3; cpu[3] = 0
    row[4] = "CPU per delete, 32 clients"; key[4] = 4; cpu[4] = 1
    row[5] = "create rate, 1 client"; key[5] = 5; cpu[5] = 0
    row[6] = "idle CPU before the run, ms per s"; key[6] = 8; cpu[6] = 2
    h = "| |"; sep = "|---|"
    for (i = 1; i <= ns; i++) {
      h = h " " names[list[i]] " |"; sep = sep "---|"
      if (up && list[i] != "upstream") { h = h " " names[list[i]] " / kube-apiserver |"; sep = sep "---|" }
    }
    print h; print sep
    for (j = 1; j <= 6; j++) {
      line = "| " row[j] " |"
      for (i = 1; i <= ns; i++) {
        line = line " " cell(list[i], key[j], cpu[j]) " |"
        if (up && list[i] != "upstream") line = line " " (cpu[j] == 2 ? "" : ratio(list[i], key[j], cpu[j])) " |"
      }
      print line
    }
    if (!up) exit
    printf "\nkube-controller-manager (service-cidr-controller only), not counted above: %.2f ms per create, %.2f ms per delete (median)\n",
      medk(6), medk(7)
    print "\n| goal | median ratio (range over rounds) | met |\n|---|---|---|"
    goal("IPAddress model: CPU per create ≤ 1/5 of kube-apiserver\x27s", "ipaddress", 2, 5, 1)
    goal("IPAddress model: create rate at 32 clients ≥ 5×", "ipaddress", 1, 5, 0)
    goal("IPAddress model: CPU per delete ≤ 1/3", "ipaddress", 4, 3, 1)
    goal("IPAddress model: delete rate at 32 clients ≥ 3×", "ipaddress", 3, 3, 0)
    goal("IPAddress model: create rate at 1 client ≥ 1.5×", "ipaddress", 5, 1.5, 0)
    goal("bitmap model: CPU per create ≤ 1/6", "bitmap", 2, 6, 1)
    goal("bitmap model: delete rate at 32 clients ≥ 3×", "bitmap", 3, 3, 0)
  }
  function medk(k,    a, i) { for (i = 1; i <= rounds["upstream"]; i++) a[i] = v["upstream", i, k]; return median(a, rounds["upstream"]) }
  # goal: met when the median ratio (unrounded, shown to two decimals) is
  # at least want.
  function goal(text, s, k, want, cpu,    got) {
    got = ratio(s, k, cpu)
    sub(/^[0-9.]+/, sprintf("%.2f", r[s, k]), got)
    printf "| %s | %s | %s |\n", text, got, (r[s, k] >= want ? "met" : "not met")
  }'
