# shellcheck shell=bash disable=SC2154
# Shared by the loopback benchmark scripts (service_vs_echo.sh,
# thread_cpu.sh); sourced, not run. Expects $bin (the folder holding the
# binaries), $out (the output folder) and $port (the first port) to be set,
# and `set -euo pipefail`. Defines $normsvc, $echo_server and $normload (the
# binaries found under $bin), $server_pid, and:
#   start NAME ARGS...   stops the running server, runs ARGS (a server that
#                        listens on 127.0.0.1:$port; its output goes to
#                        $out/NAME.server.log) and waits until it answers
#   stop_server          stops it (SIGTERM, then waits); also run on exit
find_bin() { find "$bin" -type f -name "$1" -perm -u+x | head -n 1; }
normsvc=$(find_bin normsvc); echo_server=$(find_bin normsvc_echo); normload=$(find_bin normload)
for b in "$normsvc" "$echo_server" "$normload"; do [[ -x "$b" ]] || { echo "missing binary under $bin" >&2; exit 1; }; done
server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}
trap stop_server EXIT
wait_ready() {
  for _ in $(seq 1 100); do
    "$normload" --target "127.0.0.1:$port" --concurrency 1 --warmup_s 0 --duration_s 0.05 --quiet \
      --mix "op=layernorm,dtype=fp32,rows=1,hidden=8" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "server on port $port did not come up" >&2; return 1
}
start() {  # start NAME ARGS...: one server at a time, listening on $port
  stop_server
  local name=$1; shift
  "$@" >"$out/$name.server.log" 2>&1 &
  server_pid=$!
  wait_ready
}
