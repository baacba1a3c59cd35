#!/usr/bin/env bash
# End-to-end check of `allocator serve` with the real kubectl: builds the
# binary, starts the server as a separate process on a temporary data dir
# (embedded etcd, free port), and checks what kubectl prints for create, get
# (tables, short names), apply --server-side, get --watch, delete, a bad
# input, a NodePort Service (its port, a taken port refused, freed by delete),
# and a restart on the same data. Everything runs on 127.0.0.1 and is
# cleaned up on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

# Without ALLOCATOR, run once per allocator model, both at once (each has
# its own directory, server and ports; the run mostly waits on kubectl and
# the server), and print each one's output whole once both are done.
if [ -z "${ALLOCATOR:-}" ]; then
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
  models=(bitmap ipaddress)
  pids=()
  for model in "${models[@]}"; do
    ALLOCATOR=$model "$0" >"$logs/$model" 2>&1 &
    pids+=($!)
  done
  rc=0
  for i in "${!models[@]}"; do
    wait "${pids[$i]}" || rc=1
  done
  for model in "${models[@]}"; do
    echo "===== e2e with --allocator=$model"
    cat "$logs/$model"
  done
  exit "$rc"
fi

KUBECTL=${KUBECTL:-kubectl}
command -v "$KUBECTL" >/dev/null || { echo "e2e: kubectl not found" >&2; exit 1; }

work=$(mktemp -d)
server_pid=""
watch_pid=""
cleanup() {
  [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null || true
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "e2e FAIL: $*" >&2; echo "--- server log (tail)" >&2; tail -30 "$work/server.log" >&2 || true; exit 1; }
pass() { echo "ok   $*"; }

echo "== build"
go build -o "$work/allocator" ./cmd/allocator

data="$work/data"
kc="$data/admin.kubeconfig"
k() { "$KUBECTL" --kubeconfig "$kc" --request-timeout=20s "$@"; }

start_server() {
  "$work/allocator" serve --data-dir "$data" --secure-port 0 --service-cluster-ip-range 10.96.0.0/16 --allocator "$ALLOCATOR" >>"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 300); do
    if [ -f "$kc" ] && k get --raw /readyz >/dev/null 2>&1; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || fail "server exited during start"
    sleep 0.2
  done
  fail "server not ready after 60s"
}

stop_server() {
  kill -TERM "$server_pid"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  [ "$rc" -eq 0 ] || fail "server exited with $rc on SIGTERM"
}

echo "== start"
start_server
grep -q "kubectl --kubeconfig $kc" "$work/server.log" || fail "server did not print the kubectl line"
[ "$(stat -c %a "$kc")" = "600" ] || fail "admin.kubeconfig mode is $(stat -c %a "$kc"), want 600"
pass "server ready, kubectl line printed, kubeconfig mode 0600"

code=$(curl -sk -o /dev/null -w '%{http_code}' "$(k config view -o jsonpath='{.clusters[0].cluster.server}')/api/v1/services")
[ "$code" = "401" ] || fail "anonymous request got HTTP $code, want 401"
pass "anonymous request refused (401)"
server_url=$(k config view -o jsonpath='{.clusters[0].cluster.server}')
for path in /readyz /livez /healthz /version; do
  code=$(curl -sk -o /dev/null -w '%{http_code}' "$server_url$path")
  [ "$code" = "200" ] || fail "anonymous $path got HTTP $code, want 200 (probes are public)"
done
pass "anonymous probes and /version answered (200)"

etcd_flags=$(grep -o -- '--etcd-servers https://[^ ]* --etcd-cafile [^ ]* --etcd-certfile [^ ]* --etcd-keyfile [^ ]*' "$work/server.log" | head -1)
[ -n "$etcd_flags" ] || fail "serve did not print the etcd flags for repair/migrate"
etcd_url=$(awk '{print $2}' <<<"$etcd_flags")
if curl -sk --max-time 5 "$etcd_url/version" >/dev/null 2>&1; then fail "embedded etcd answered without a client certificate"; fi
# shellcheck disable=SC2086 # the printed flags are words
"$work/allocator" repair --kubeconfig "$kc" $etcd_flags >"$work/repair.out" 2>&1 || { cat "$work/repair.out"; fail "repair with the printed etcd flags"; }
pass "embedded etcd refuses clients without its certificate; repair works with the printed flags"

echo "== create and get"
k create service clusterip web --tcp=80:8080 >/dev/null
k create service clusterip dns --tcp=53 --clusterip=10.96.0.10 >/dev/null
out=$(k get svc)
echo "$out"
head -1 <<<"$out" | grep -Eq '^NAME +TYPE +CLUSTER-IP +EXTERNAL-IP +PORT\(S\) +AGE$' || fail "service columns"
grep -Eq '^web +ClusterIP +10\.96\.[0-9]+\.[0-9]+ +<none> +80/TCP ' <<<"$out" || fail "web row"
grep -Eq '^dns +ClusterIP +10\.96\.0\.10 +<none> +53/TCP ' <<<"$out" || fail "dns row"
grep -Eq '^kubernetes +ClusterIP +10\.96\.0\.1 +<none> +443/TCP ' <<<"$out" || fail "kubernetes row"
pass "get svc columns and rows"

grep -q '^default' <<<"$(k get services -A)" || fail "get services -A"
out=$(k get ns)
head -1 <<<"$out" | grep -Eq '^NAME +STATUS +AGE$' || fail "namespace columns"
grep -Eq '^kube-system +Active ' <<<"$out" || fail "kube-system row"
pass "get ns"

out=$(k get servicecidrs)
echo "$out"
head -1 <<<"$out" | grep -Eq '^NAME +CIDRS +AGE$' || fail "servicecidr columns"
grep -Eq '^kubernetes +10\.96\.0\.0/16 ' <<<"$out" || fail "default servicecidr row"
pass "get servicecidrs"

cat > "$work/ip.yaml" <<'YAML'
apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata:
  name: 10.96.200.200
spec:
  parentRef:
    group: ""
    resource: services
    namespace: default
    name: web
YAML
k apply -f "$work/ip.yaml" >/dev/null
out=$(k get ip)
echo "$out"
head -1 <<<"$out" | grep -Eq '^NAME +PARENTREF$' || fail "ipaddress columns"
grep -Eq '^10\.96\.200\.200 +services/default/web$' <<<"$out" || fail "ipaddress row"
k get ipaddresses 10.96.200.200 >/dev/null || fail "get ipaddresses by name"
if [ "$ALLOCATOR" = ipaddress ]; then
  web_ip=$(k get svc web -o jsonpath='{.spec.clusterIP}')
  grep -Eq "^${web_ip//./\\.} +services/default/web$" <<<"$out" || fail "no IPAddress for web ($web_ip)"
  grep -Eq '^10\.96\.0\.1 +services/default/kubernetes$' <<<"$out" || fail "no IPAddress for kubernetes"
fi
k delete ip 10.96.200.200 >/dev/null
pass "get ipaddresses (PARENTREF)"

echo "== watch"
k get svc --watch --output-watch-events >"$work/watch.out" 2>&1 &
watch_pid=$!
sleep 1
k create service clusterip watched --tcp=8080 >/dev/null
for _ in $(seq 1 50); do grep -q 'ADDED .*watched' "$work/watch.out" && break; sleep 0.2; done
grep -q 'ADDED .*watched' "$work/watch.out" || { cat "$work/watch.out"; fail "watch did not see the new Service"; }
k delete svc watched >/dev/null
for _ in $(seq 1 50); do grep -q 'DELETED .*watched' "$work/watch.out" && break; sleep 0.2; done
grep -q 'DELETED .*watched' "$work/watch.out" || { cat "$work/watch.out"; fail "watch did not see the delete"; }
kill "$watch_pid" 2>/dev/null || true; wait "$watch_pid" 2>/dev/null || true; watch_pid=""
pass "get --watch sees ADDED and DELETED"

echo "== apply --server-side"
cat > "$work/svc.yaml" <<'YAML'
apiVersion: v1
kind: Service
metadata:
  name: applied
  labels: {tier: one}
spec:
  selector: {app: applied}
  ports:
  - port: 443
    targetPort: 8443
YAML
grep -q 'serverside-applied' <<<"$(k apply --server-side -f "$work/svc.yaml")" || fail "apply --server-side create"
ip1=$(k get svc applied -o jsonpath='{.spec.clusterIP}')
sed -i 's/tier: one/tier: two/' "$work/svc.yaml"
k apply --server-side -f "$work/svc.yaml" >/dev/null || fail "apply --server-side update"
ip2=$(k get svc applied -o jsonpath='{.spec.clusterIP}')
[ "$(k get svc applied -o jsonpath='{.metadata.labels.tier}')" = "two" ] || fail "apply did not update the label"
[ -n "$ip1" ] && [ "$ip1" = "$ip2" ] || fail "apply changed the cluster IP ($ip1 -> $ip2)"
grep -q kubectl <<<"$(k get svc applied -o jsonpath='{.metadata.managedFields[*].manager}')" || fail "managedFields"
pass "apply --server-side create+update keeps $ip1"

echo "== explain (OpenAPI)"
grep -q 'FIELD: *clusterIPs' <<<"$(k explain service.spec.clusterIPs)" || fail "kubectl explain"
pass "kubectl explain"

echo "== bad input"
if k create service clusterip bad1 --tcp=80 --clusterip=10.96.0.256 2>"$work/err"; then fail "malformed IP accepted"; fi
grep -q 'spec.clusterIPs' "$work/err" || fail "malformed IP message: $(cat "$work/err")"
if k create service clusterip bad2 --tcp=80 --clusterip=10.96.0.10 2>"$work/err"; then fail "duplicate IP accepted"; fi
grep -q 'provided IP is already allocated' "$work/err" || fail "duplicate IP message: $(cat "$work/err")"
if k create service nodeport np-bad --tcp=80 --node-port=20000 2>"$work/err"; then fail "node port outside the range accepted"; fi
grep -q 'provided port is not in the valid range. The range of valid ports is 30000-32767' "$work/err" || fail "node port range message: $(cat "$work/err")"
k get --raw /readyz >/dev/null || fail "server unhealthy after bad input"
pass "bad input refused with clear messages, server healthy"

echo "== node ports"
k create service nodeport np --tcp=80 >/dev/null || fail "create service nodeport"
grep -Eq '^np +NodePort +[0-9.]+ +<none> +80:3[0-9]{4}/TCP' <<<"$(k get svc np --no-headers)" || fail "get svc np: $(k get svc np --no-headers)"
np_port=$(k get svc np -o jsonpath='{.spec.ports[0].nodePort}')
if k create service nodeport np2 --tcp=81 --node-port="$np_port" 2>"$work/err"; then fail "node port $np_port handed out twice"; fi
grep -q 'provided port is already allocated' "$work/err" || fail "taken node port message: $(cat "$work/err")"
k delete svc np >/dev/null
k create service nodeport np2 --tcp=81 --node-port="$np_port" >/dev/null || fail "node port $np_port not freed by the delete"
k delete svc np2 >/dev/null
pass "NodePort: 80:$np_port/TCP, a taken port refused, freed by delete"

echo "== delete"
web_ip=$(k get svc web -o jsonpath='{.spec.clusterIP}')
k delete svc web >/dev/null
k get svc web >/dev/null 2>&1 && fail "web still there"
k create service clusterip reuse --tcp=80 --clusterip="$web_ip" >/dev/null || fail "IP $web_ip not released by delete"
pass "delete releases $web_ip"

echo "== restart"
stop_server
pass "clean exit on SIGTERM"
start_server
[ "$(k get svc dns -o jsonpath='{.spec.clusterIP}')" = "10.96.0.10" ] || fail "dns lost after restart"
if k create service clusterip dup --tcp=80 --clusterip=10.96.0.10 2>/dev/null; then fail "IP handed out twice after restart"; fi
pass "restart keeps Services and allocations"
stop_server

echo "e2e ($ALLOCATOR): all checks passed"
