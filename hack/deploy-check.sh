#!/usr/bin/env bash
# Checks deploy/ and the delegated-auth flags of `allocator serve` against a
# REAL kube-apiserver started with --authorization-mode=RBAC (loopback only):
#
#  1. `kubectl apply --dry-run=server -f deploy/` is accepted and creates no
#     Pod and no Job (the static pod lives in deploy/static-pod/, the one-off
#     Jobs in deploy/jobs/; apply does not recurse into them), and
#     deploy/jobs/ is accepted on its own. Every manifest names the image
#     `hack/image.sh --print-tag` gives (the release).
#  2. `allocator repair` runs as the ServiceAccount of deploy/rbac.yaml
#     (kubeconfig with `as:` impersonation) and deletes a seeded orphan
#     IPAddress; with any one of the rules' verbs it needs taken away from
#     the ClusterRole it is refused (exit 1, or a "forbidden" warning for
#     events). `allocator status` runs in both models as a ServiceAccount
#     bound to allocator:status alone, and fails with any of its rules'
#     resources taken away.
#  3. `allocator serve --authentication-kubeconfig --authorization-kubeconfig`
#     pointing at kube-apiserver lets a user whom kube-apiserver's RBAC allows
#     create a Service through our server (token checked by TokenReview), and
#     refuses (403) a user without the grant.
#
#   hack/deploy-check.sh            KUBE=v1.37.2 hack/deploy-check.sh
#
# kube-apiserver is built once from the published k8s.io/kubernetes module
# (hack/lib/kube-apiserver-build.sh, cached under
# ${XDG_CACHE_HOME:-~/.cache}/allocator/kube-apiserver); CI does not run this.
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/kube-apiserver-run.sh

KUBE=${KUBE:-v1.33.13}
KEEP=${KEEP:-}   # non-empty: keep logs and data (path printed at the end)

work=$(mktemp -d)
pids=()
finish() {
  stop_pids "${pids[@]}"
  if [ -n "$KEEP" ]; then echo "logs and data kept in $work" >&2; else rm -rf "$work"; fi
}
trap finish EXIT

started=$(date +%s)
fail=0
pass() { echo "PASS $*"; }
failed() { echo "FAIL $*"; fail=1; }
wait_for() { retry_for "$1" "$work" "${@:2}" || exit 1; } # WHAT CMD...: exits the script on failure

echo "building: allocator, etcdserver (kube-apiserver $KUBE only when not cached)" >&2
go build -o "$work/allocator" ./cmd/allocator
go build -o "$work/etcdserver" ./test/tools/etcdserver
kas=$(hack/lib/kube-apiserver-build.sh "$KUBE")

"$work/etcdserver" >"$work/etcd.out" 2>"$work/etcd.log" &
pids+=($!)
wait_for etcd grep -q '^ready ' "$work/etcd.out"
etcd_url=$(sed -n 's/^ready //p' "$work/etcd.out")

# kube-apiserver's self-signed certificate is not checked (throwaway, loopback).
# Users of kube-apiserver's token file: admin (system:masters), alice (who
# gets create on Services below), bob (no grant), and the identity our
# server reviews tokens and access with (system:auth-delegator, as in
# deploy/serve-rbac.yaml).
tok() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
admin_token=$(tok) alice_token=$(tok) bob_token=$(tok) delegator_token=$(tok)
cat >"$work/tokens.csv" <<EOF
$admin_token,admin,admin,system:masters
$alice_token,alice,alice,developers
$bob_token,bob,bob,developers
$delegator_token,system:allocator,system:allocator,
EOF
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null
openssl rsa -in "$work/sa.key" -pubout -out "$work/sa.pub" 2>/dev/null

kas_token=$admin_token KAS_AUTHZ=RBAC kas_start "$kas" "$etcd_url" "$work" "$work" 10.96.0.0/24
pids+=("$kas_pid")
kport=$kas_port
kubeconfig() { # USER TOKEN [AS]
  cat <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kas, cluster: {server: "https://127.0.0.1:$kport", insecure-skip-tls-verify: true}}]
users: [{name: $1, user: {token: "$2"${3:+, as: "$3"}}}]
contexts: [{name: kas, context: {cluster: kas, user: $1}}]
current-context: kas
EOF
}
kubeconfig admin "$admin_token" >"$work/admin.kubeconfig"
# The repair job's identity: the admin impersonating the ServiceAccount, so
# every request is authorized as the ServiceAccount alone.
kubeconfig admin "$admin_token" system:serviceaccount:kube-system:allocator-repair >"$work/repair.kubeconfig"
kubeconfig system:allocator "$delegator_token" >"$work/delegator.kubeconfig"
k() { kubectl --kubeconfig "$work/admin.kubeconfig" "$@"; }
wait_for kube-apiserver kubectl --kubeconfig "$work/admin.kubeconfig" get --raw /readyz
# kube-controller-manager would create it; the static pod's ServiceAccount
# admission looks it up.
wait_for "namespace kube-system" kubectl --kubeconfig "$work/admin.kubeconfig" get namespace kube-system
k -n kube-system create serviceaccount default >/dev/null 2>&1 || true

# 1. Server-side dry run of every manifest.
if out=$(k apply --dry-run=server -f deploy/ 2>&1); then
  if grep -q '^pod/' <<<"$out"; then failed "kubectl apply -f deploy/ would create a Pod: $out"; fi
  if grep -q '^job\.batch/' <<<"$out"; then failed "kubectl apply -f deploy/ would start a one-off Job: $out"; fi
  pass "kubectl apply --dry-run=server -f deploy/ ($(echo "$out" | wc -l) objects, no Pod, no Job)"
else
  failed "kubectl apply --dry-run=server -f deploy/: $out"
fi
if out=$(k apply --dry-run=server -f deploy/jobs/ 2>&1); then
  pass "kubectl apply --dry-run=server -f deploy/jobs/ ($(echo "$out" | wc -l) objects)"
else
  failed "kubectl apply --dry-run=server -f deploy/jobs/: $out"
fi
release_image=$(env -u TAG -u IMAGE hack/image.sh --print-tag)
if others=$(grep -rh '^ *image:' deploy/ | sed 's|^ *image: *||' | grep -vxF "$release_image"); then
  failed "deploy/ names images other than $release_image: $others"
else
  pass "every manifest of deploy/ runs $release_image"
fi

# 2. repair as the ServiceAccount.
k apply -f deploy/rbac.yaml >/dev/null
k create service clusterip web --tcp 80 >/dev/null
k create service clusterip db --tcp 5432 >/dev/null
wait_for "default ServiceCIDR" kubectl --kubeconfig "$work/admin.kubeconfig" get servicecidr kubernetes
seed_orphan() { # an IPAddress of ours whose Service does not exist
  k delete ipaddress 10.96.0.200 --ignore-not-found >/dev/null
  k create -f - >/dev/null <<'EOF'
apiVersion: networking.k8s.io/v1
kind: IPAddress
metadata:
  name: 10.96.0.200
  labels:
    ipaddress.kubernetes.io/ip-family: IPv4
    ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io
spec:
  parentRef: {group: "", resource: services, namespace: default, name: gone}
EOF
  sleep 1 # older than --orphan-grace (creationTimestamp has whole seconds)
}
run_repair() { # prints the exit code; output in $work/repair.out
  local rc=0
  timeout 120 "$work/allocator" repair --kubeconfig "$work/repair.kubeconfig" --model ipaddress \
    --orphan-grace 1ms -o json >"$work/repair.out" 2>&1 || rc=$?
  echo "$rc"
}
seed_orphan
rc=$(run_repair)
if { [ "$rc" = 0 ] || [ "$rc" = 2 ]; } && ! grep -qi forbidden "$work/repair.out" && ! k get ipaddress 10.96.0.200 >/dev/null 2>&1; then
  pass "allocator repair as system:serviceaccount:kube-system:allocator-repair (exit $rc, orphan 10.96.0.200 deleted)"
else
  failed "allocator repair as the ServiceAccount: exit $rc: $(head -c 600 "$work/repair.out")"
fi
# allocator status as a ServiceAccount bound to allocator:status only, in
# both models (the bitmap model reads the map from etcd and lists Services).
# kube-apiserver 1.33 dual-writes the map; a later one writes none, so the
# migration writes it first (idempotent where it exists).
if ! out=$(timeout 120 "$work/allocator" migrate --to bitmap --dry-run=false --kubeconfig "$work/admin.kubeconfig" \
  --etcd-servers "$etcd_url" --service-cluster-ip-range 10.96.0.0/24 2>&1); then
  failed "allocator migrate --to bitmap (to give the bitmap status check a map): $out"
fi
k -n kube-system create serviceaccount allocator-status >/dev/null
k create clusterrolebinding allocator:status --clusterrole=allocator:status \
  --serviceaccount=kube-system:allocator-status >/dev/null
kubeconfig admin "$admin_token" system:serviceaccount:kube-system:allocator-status >"$work/status.kubeconfig"
run_status() { # MODEL: prints the exit code; output in $work/status.out
  local rc=0 extra=()
  [ "$1" = bitmap ] && extra=(--etcd-servers "$etcd_url")
  timeout 60 "$work/allocator" status --kubeconfig "$work/status.kubeconfig" --model "$1" "${extra[@]}" \
    >"$work/status.out" 2>&1 || rc=$?
  echo "$rc"
}
for model in ipaddress bitmap; do
  rc=$(run_status "$model")
  if [ "$rc" = 0 ] && grep -q "10.96.0.0/24" "$work/status.out"; then
    pass "allocator status --model $model as system:serviceaccount:kube-system:allocator-status"
  else
    failed "allocator status --model $model as the status ServiceAccount: exit $rc: $(head -c 600 "$work/status.out")"
  fi
done
status_role=$(k get clusterrole allocator:status -o json)
for mrv in ipaddress:1:ipaddresses ipaddress:1:servicecidrs bitmap:0:services; do
  model=${mrv%%:*} rest=${mrv#*:} rule=${rest%%:*} res=${rest#*:}
  echo "$status_role" | python3 -c '
import json, sys
role = json.load(sys.stdin)
rule, res = int(sys.argv[1]), sys.argv[2]
role["rules"][rule]["resources"].remove(res)
if not role["rules"][rule]["resources"]:
    del role["rules"][rule]
for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
    role["metadata"].pop(k, None)
json.dump(role, sys.stdout)' "$rule" "$res" | k replace -f - >/dev/null
  case $res in services) group="" ;; *) group=.networking.k8s.io ;; esac
  for _ in $(seq 1 50); do
    [ "$(k auth can-i list "$res$group" --as system:serviceaccount:kube-system:allocator-status 2>/dev/null)" = no ] && break
    sleep 0.2
  done
  rc=$(run_status "$model")
  if [ "$rc" != 0 ] && grep -qi forbidden "$work/status.out"; then
    pass "without 'list $res' allocator status --model $model is refused (exit $rc)"
  else
    failed "without 'list $res' allocator status --model $model still succeeded (exit $rc)"
  fi
  k apply -f deploy/rbac.yaml >/dev/null
done

# Take one verb away at a time (rule index, verb): each must break repair.
role_json=$(k get clusterrole allocator:repair -o json)
for rv in 0:list 0:get 1:list 1:get 1:delete 2:list 4:create; do
  rule=${rv%%:*} verb=${rv##*:}
  echo "$role_json" | python3 -c '
import json, sys
role = json.load(sys.stdin)
rule, verb = int(sys.argv[1]), sys.argv[2]
role["rules"][rule]["verbs"].remove(verb)
if not role["rules"][rule]["verbs"]:
    del role["rules"][rule]  # a rule needs a verb
for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
    role["metadata"].pop(k, None)
json.dump(role, sys.stdout)' "$rule" "$verb" | k replace -f - >/dev/null
  what="$(echo "$role_json" | python3 -c 'import json,sys; r=json.load(sys.stdin)["rules"][int(sys.argv[1])]; print(",".join(r["resources"]))' "$rule") $verb"
  seed_orphan
  # RBAC changes reach the authorizer through an informer: wait until the
  # ServiceAccount has lost the verb.
  res=${what%% *}
  case $res in services|events) group="" ;; *) group=.networking.k8s.io ;; esac
  for _ in $(seq 1 50); do
    [ "$(k auth can-i "$verb" "$res$group" --as system:serviceaccount:kube-system:allocator-repair 2>/dev/null)" = no ] && break
    sleep 0.2
  done
  rc=$(run_repair)
  if [ "$rc" = 1 ] || grep -qi forbidden "$work/repair.out"; then
    pass "without '$what' allocator repair is refused (exit $rc: $(grep -io 'cannot [a-z]* resource "[a-z]*"' "$work/repair.out" | head -1))"
  else
    failed "without '$what' allocator repair still succeeded (exit $rc)"
  fi
  k apply -f deploy/rbac.yaml >/dev/null
done

# 3. Delegated authentication and authorization through kube-apiserver.
k create clusterrole service-creator --verb=create,get,list --resource=services >/dev/null
k create clusterrolebinding alice-creates-services --clusterrole=service-creator --user=alice >/dev/null
k apply -f deploy/serve-rbac.yaml >/dev/null
"$work/allocator" serve --data-dir "$work/ours" --secure-port 0 --service-cluster-ip-range 10.97.0.0/24 \
  --authentication-kubeconfig "$work/delegator.kubeconfig" --authorization-kubeconfig "$work/delegator.kubeconfig" \
  --audit-policy-file deploy/examples/audit-policy.yaml --audit-log-path "$work/ours-audit.log" \
  >"$work/ours.out" 2>"$work/ours.log" &
pids+=($!)
wait_for "allocator serve" kubectl --kubeconfig "$work/ours/admin.kubeconfig" get --raw /readyz
ours() { # USER TOKEN ARGS...
  local user=$1 token=$2; shift 2
  kubectl --kubeconfig "$work/ours/admin.kubeconfig" --token "$token" "$@"
}
if out=$(ours alice "$alice_token" create service clusterip via-ours --tcp 80 2>&1); then
  pass "alice (RBAC grant on kube-apiserver) created a Service through allocator serve: $out"
else
  failed "alice could not create a Service through allocator serve: $out"
fi
if out=$(ours bob "$bob_token" create service clusterip not-bob --tcp 80 2>&1); then
  failed "bob (no grant) created a Service through allocator serve: $out"
elif grep -q 'forbidden: User "bob"' <<<"$out"; then
  pass "bob (no grant) refused: $(echo "$out" | head -c 160)"
else
  failed "bob refused for another reason: $out"
fi
if grep -q '"username":"alice"' "$work/ours-audit.log" 2>/dev/null; then
  pass "audit log of allocator serve records alice's create"
else
  failed "no audit event for alice in $work/ours-audit.log"
fi

echo "deploy-check: $(( $(date +%s) - started ))s, kube-apiserver $KUBE" >&2
exit "$fail"
