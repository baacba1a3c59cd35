# Shared by the hack/ scripts that run a real kube-apiserver on loopback
# beside an etcd (hack/kube-apiserver-mixed.sh, hack/capture-fixture.sh).
# Source it; the caller owns the process (kill it in its own cleanup).

# kas_credentials DIR: an admin token (printed into DIR/tokens.csv, group
# system:masters, kept in $kas_token) and the service-account key pair
# (DIR/sa.key, DIR/sa.pub) every kube-apiserver run needs.
kas_credentials() {
  local dir=$1
  kas_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$kas_token,admin,admin,system:masters" >"$dir/tokens.csv"
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
}

# kas_start BIN ETCD_URL CREDS_DIR RUN_DIR RANGE [FLAGS...]: starts
# kube-apiserver BIN on 127.0.0.1 and a free port with the credentials of
# kas_credentials, logging to RUN_DIR/kube-apiserver.log, and writes
# RUN_DIR/kas.kubeconfig (admin token $kas_token, the self-signed serving
# certificate not verified: loopback only). The authorization mode is
# $KAS_AUTHZ (default AlwaysAllow). Sets $kas_pid and $kas_port; does not
# wait.
kas_start() {
  local bin=$1 etcd_url=$2 creds=$3 dir=$4 range=$5
  shift 5
  kas_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  "$bin" --etcd-servers "$etcd_url" --authorization-mode "${KAS_AUTHZ:-AlwaysAllow}" --token-auth-file "$creds/tokens.csv" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
    --secure-port "$kas_port" --cert-dir "$dir/kas-certs" --service-cluster-ip-range "$range" \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$creds/sa.pub" \
    --service-account-signing-key-file "$creds/sa.key" "$@" >"$dir/kube-apiserver.log" 2>&1 &
  kas_pid=$!
  cat >"$dir/kas.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: kas, cluster: {server: "https://127.0.0.1:$kas_port", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$kas_token"}}]
contexts: [{name: kas, context: {cluster: kas, user: admin}}]
current-context: kas
KC
}

# stop_pids PID...: SIGTERM each, wait up to 10 s for each, then SIGKILL.
stop_pids() {
  local pid
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# retry_for WHAT LOGDIR CMD...: run CMD (a program, not a shell function)
# until it succeeds, for up to 120 s; on failure print the end of LOGDIR's
# logs and return 1.
retry_for() {
  local what=$1 logdir=$2
  shift 2
  local deadline=$(( $(date +%s) + 120 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if timeout 10 "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "$what not ready after 120s; last log lines:" >&2
  tail -n 5 "$logdir"/*.log | cut -c1-400 >&2
  return 1
}
