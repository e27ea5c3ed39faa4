#!/usr/bin/env bash
# Make sure a Docker engine answers; install and start one if needed (idempotent).
#
#   .ci/docker-up.sh                                   # default engine: /var/run/docker.sock
#   .ci/docker-up.sh --socket /var/run/docker-b.sock --data-root /var/lib/docker-b
#
# Options:
#   --socket PATH      unix socket of the engine (default /var/run/docker.sock, or DOCKER_HOST)
#   --data-root DIR    dockerd data root (default /var/lib/docker; a second engine needs its own)
#   --exec-root DIR    dockerd exec root (default derived from the socket name)
#   --log FILE         dockerd log (default /tmp/dockerd[-NAME].log)
#   --timeout SECONDS  how long to wait for `docker info` (default 60)
#
# The engine runs with --iptables=false --bridge=none: containers use --network host.
# On success prints `DOCKER_HOST=unix://...` as its last line; exits non-zero with the reason
# and the tail of the dockerd log otherwise.
set -euo pipefail

socket=""
data_root=""
exec_root=""
log=""
timeout=60

while [[ $# -gt 0 ]]; do
  case "$1" in
    --socket) socket="$2"; shift 2 ;;
    --data-root) data_root="$2"; shift 2 ;;
    --exec-root) exec_root="$2"; shift 2 ;;
    --log) log="$2"; shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "docker-up: unknown argument: $1" >&2; exit 2 ;;
  esac
done

if [[ -z "$socket" ]]; then
  if [[ "${DOCKER_HOST:-}" == unix://* ]]; then
    socket="${DOCKER_HOST#unix://}"
  else
    socket=/var/run/docker.sock
  fi
fi
name="$(basename "$socket" .sock)"          # docker, docker-b, ...
suffix="${name#docker}"                     # "", -b, ...
data_root="${data_root:-/var/lib/docker${suffix}}"
exec_root="${exec_root:-/var/run/${name}-exec}"
log="${log:-/tmp/dockerd${suffix}.log}"
pidfile="/var/run/${name}.pid"
host="unix://${socket}"

say() { echo "docker-up: $*" >&2; }

engine_answers() { DOCKER_HOST="$host" timeout 10 docker info >/dev/null 2>&1; }

install_missing() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v docker >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if [[ ${#missing[@]} -gt 0 ]]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
  fi
}

if engine_answers; then
  say "engine already answers on $host"
  echo "DOCKER_HOST=$host"
  exit 0
fi

install_missing

if [[ $(id -u) -ne 0 ]]; then
  say "no engine on $host and not root: cannot start dockerd"
  exit 1
fi

# A stale pid file or socket from a dead daemon would make dockerd refuse to start.
if [[ -f "$pidfile" ]] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  rm -f "$pidfile"
fi
if [[ -S "$socket" ]] && ! [[ -f "$pidfile" ]]; then
  rm -f "$socket"
fi

if [[ -f "$pidfile" ]]; then
  say "dockerd already running (pid $(cat "$pidfile")), waiting for it"
else
  mkdir -p "$data_root" "$exec_root" "$(dirname "$socket")" || {
    say "cannot create the data root, exec root or socket directory"; exit 1; }
  say "starting dockerd: socket $socket, data root $data_root, log $log"
  # containerd is shared by all engines of this machine unless it is not running yet:
  # dockerd then starts its own managed containerd under exec_root.
  nohup dockerd \
    --iptables=false --ip6tables=false --bridge=none \
    --host "$host" \
    --data-root "$data_root" \
    --exec-root "$exec_root" \
    --pidfile "$pidfile" \
    >"$log" 2>&1 </dev/null &
  disown || true
fi

deadline=$((SECONDS + timeout))
until engine_answers; do
  if [[ -f "$pidfile" ]] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    say "dockerd exited during start-up"; break
  fi
  if (( SECONDS >= deadline )); then
    say "dockerd did not answer within ${timeout}s"; break
  fi
  sleep 1
done

if ! engine_answers; then
  say "no Docker engine on $host; last lines of $log:"
  tail -n 30 "$log" >&2 || true
  exit 1
fi
say "engine up on $host after $((SECONDS))s"
echo "DOCKER_HOST=$host"
