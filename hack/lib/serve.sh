# Shared by the hack/ scripts that run `allocator serve` as a process:
# a temporary work dir, the binary, a server on a free port, and cleanup on
# exit. Source it, then call serve_start ARGS...; $work, $kc and
# $server_pid are set for the caller.

work=$(mktemp -d)
server_pid=""
kc="$work/data/admin.kubeconfig"

# serve_stop stops the server started by serve_start (SIGTERM, then SIGKILL
# after STOP_TIMEOUT seconds, 10 by default) and waits until it has exited,
# so that the next start finds the data dir free; the data dir stays.
serve_stop() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 $((${STOP_TIMEOUT:-10} * 10))); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -KILL "$server_pid" 2>/dev/null; then
      echo "serve_stop: the server was still stopping after ${STOP_TIMEOUT:-10}s; killed" >&2
    fi
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}

serve_cleanup() {
  serve_stop
  rm -rf "$work"
}
trap serve_cleanup EXIT

# serve_build builds cmd/allocator into $work (or takes $ALLOCATOR_BIN, to
# measure another build, e.g. an earlier commit's), once.
serve_build() {
  [ -x "$work/allocator" ] && return 0
  if [ -n "${ALLOCATOR_BIN:-}" ]; then
    cp "$ALLOCATOR_BIN" "$work/allocator"
  else
    go build -o "$work/allocator" ./cmd/allocator
  fi
}

# serve_start starts `allocator serve ARGS...` on the data dir $work/data
# (fresh the first time, kept by serve_stop) and a free port, and waits
# until /readyz is ok.
serve_start() {
  serve_build
  "$work/allocator" serve --data-dir "$work/data" --secure-port 0 "$@" >>"$work/server.log" 2>&1 &
  server_pid=$!
  serve_wait "$kc" "$server_pid" "$work/server.log"
}

# serve_wait KUBECONFIG PID LOG waits until the server PID, whose admin
# kubeconfig is KUBECONFIG, answers /readyz ok; it exits with LOG's tail if
# the server exits or is not ready within READY_TIMEOUT seconds (60; a
# start on a million Services takes longer).
serve_wait() {
  local timeout=${READY_TIMEOUT:-60}
  for _ in $(seq 1 $((timeout * 5))); do
    if [ -f "$1" ] && kubectl --kubeconfig "$1" get --raw /readyz >/dev/null 2>&1; then return 0; fi
    kill -0 "$2" 2>/dev/null || { tail -20 "$3"; echo "server exited" >&2; exit 1; }
    sleep 0.2
  done
  tail -20 "$3"; echo "server not ready after ${timeout}s" >&2; exit 1
}
