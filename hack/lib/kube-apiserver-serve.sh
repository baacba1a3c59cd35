# The benchmark scripts' upstream counterpart of serve.sh: a real
# kube-apiserver VERSION as a cluster runs it, on the same etcd our server
# embeds, so that both are measured the same way. Source serve.sh first
# (for $work and its cleanup), then this file; call upstream_start.
#
# What runs, on loopback only:
#   - etcd: test/bench/embeddedetcd, the member `allocator serve` embeds with
#     serve's settings (fsync on, TLS, client certificate required), as a
#     process of its own;
#   - kube-apiserver VERSION on it (hack/lib/kube-apiserver-run.sh: token
#     authentication, AlwaysAllow, default admission plugins, the IPAddress
#     model, which is GA and the default since 1.33);
#   - kube-controller-manager VERSION with only service-cidr-controller, which
#     upstream runs there and ours runs inside the server (a deleted
#     ServiceCIDR's finalizer).
# The binaries come from hack/lib/kube-apiserver-build.sh (a ~40 min build the
# first time, then cached).
. hack/lib/kube-apiserver-run.sh

upstream_etcd_pid=""
upstream_kas_pid=""
upstream_kcm_pid=""
upstream_kas_args=() # kas_start's arguments, for upstream_restart_apiserver
upstream_kcm_bin=""

# upstream_cached_bin VERSION COMPONENT prints the path of a binary
# kube-apiserver-build.sh has built, or fails; it never builds.
upstream_cached_bin() {
  local cache=${ALLOCATOR_KUBE_APISERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allocator/kube-apiserver}
  [ -x "$cache/$1/$2" ] && echo "$cache/$1/$2"
}

# upstream_stop stops kube-controller-manager, then kube-apiserver, then
# etcd (one at a time: a kube-apiserver whose etcd is gone does not finish
# its shutdown).
upstream_stop() {
  local p
  for p in "$upstream_kcm_pid" "$upstream_kas_pid" "$upstream_etcd_pid"; do [ -z "$p" ] || stop_pids "$p"; done
  upstream_etcd_pid="" upstream_kas_pid="" upstream_kcm_pid=""
}

upstream_cleanup() {
  upstream_stop
  serve_cleanup
}
trap upstream_cleanup EXIT

# upstream_start VERSION RANGE [KUBE-APISERVER FLAGS...] starts etcd,
# kube-apiserver and kube-controller-manager in $work/upstream (fresh each
# time) and waits until the default ServiceCIDR is Ready. Sets $kc (the admin
# kubeconfig), $upstream_etcd_pid, $upstream_kas_pid and $upstream_kcm_pid.
upstream_start() {
  local version=$1 range=$2
  shift 2
  local kas kcm dir="$work/upstream"
  local c
  for c in kube-apiserver kube-controller-manager; do
    hack/lib/kube-apiserver-build.sh "$version" "$c" >"$work/$c.path" ||
      { echo "no $c $version: hack/lib/kube-apiserver-build.sh $version $c failed" >&2; return 1; }
  done
  kas=$(cat "$work/kube-apiserver.path")
  kcm=$(cat "$work/kube-controller-manager.path")
  [ -x "$work/embeddedetcd" ] || go build -o "$work/embeddedetcd" ./test/bench/embeddedetcd
  rm -rf "$dir"
  mkdir -p "$dir"
  "$work/embeddedetcd" --data-dir "$dir/etcd" >"$dir/etcd.out" 2>"$dir/etcd.log" &
  upstream_etcd_pid=$!
  retry_for etcd "$dir" grep -q '^ready ' "$dir/etcd.out"
  local pki="$dir/etcd/pki"
  kas_credentials "$dir"
  upstream_kas_args=("$kas" "$(sed -n 's/^ready //p' "$dir/etcd.out")" "$dir" "$dir" "$range"
    --etcd-cafile "$pki/ca.crt" --etcd-certfile "$pki/client.crt" --etcd-keyfile "$pki/client.key" "$@")
  upstream_start_apiserver
  upstream_kcm_bin=$kcm
  upstream_start_kcm
  retry_for "the kubernetes Service" "$dir" kubectl --kubeconfig "$kc" -n default get service kubernetes
  retry_for "the default ServiceCIDR" "$dir" kubectl --kubeconfig "$kc" wait --for=condition=Ready servicecidr/kubernetes --timeout=5s
}

# upstream_start_kcm starts kube-controller-manager (service-cidr-controller
# only) against $kc.
upstream_start_kcm() {
  "$upstream_kcm_bin" --kubeconfig "$kc" --controllers=service-cidr-controller --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port=0 >>"$work/upstream/kube-controller-manager.log" 2>&1 &
  upstream_kcm_pid=$!
}

# upstream_start_apiserver starts kube-apiserver with upstream_start's
# arguments (a free port each time; $kc is rewritten) and waits for /readyz.
upstream_start_apiserver() {
  kas_start "${upstream_kas_args[@]}"
  upstream_kas_pid=$kas_pid
  kc="$work/upstream/kas.kubeconfig"
  retry_for kube-apiserver "$work/upstream" kubectl --kubeconfig "$kc" get --raw /readyz
}

# upstream_restart_apiserver stops kube-controller-manager and kube-apiserver
# and starts them again on the same etcd, which keeps running (kube-apiserver
# gets a new port, which kube-controller-manager's kubeconfig must name).
upstream_restart_apiserver() {
  stop_pids "$upstream_kcm_pid"
  stop_pids "$upstream_kas_pid"
  upstream_kcm_pid=""
  upstream_start_apiserver
  upstream_start_kcm
}
