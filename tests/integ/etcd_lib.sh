#!/bin/bash
# etcd_lib.sh -- starts and stops real etcd servers for the etcd back-end
# scenarios (sourced after lib.sh).  Every member listens on free loopback
# ports, keeps its data under $T, and is stopped by pid (SIGTERM, then
# SIGKILL) when the scenario ends.
command -v etcd >/dev/null || skip "etcd not installed (apt-get install etcd-server)"

ETCD_PIDS=()

etcd_cleanup() {
  local p
  for p in "${ETCD_PIDS[@]+"${ETCD_PIDS[@]}"}"; do
    kill -KILL "$p" 2>/dev/null
  done
  cleanup
}
trap etcd_cleanup EXIT

# Keep the environment of the caller (ETCD_*) away from test servers.
unset $(env | sed -n 's/^\(ETCD_[A-Z_]*\)=.*/\1/p')

# free_ports N: N distinct free loopback ports on one line, drawn below
# the kernel's ephemeral range as lib.sh's free_port is: a port the kernel
# handed out once can be taken as another connect()'s source port before
# etcd binds it (an etcd that cannot bind waited out etcd_wait_healthy).
free_ports() {
  python3 - "$1" <<'PY'
import random, socket, sys
lo, hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
first, last = (10000, lo - 1) if lo > 11000 else (hi + 1, 65535)
want, socks, ports = int(sys.argv[1]), [], []
for _ in range(1000 if first < last else 0):
    if len(ports) == want:
        break
    p = random.randint(first, last)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        s.close()
        continue
    socks.append(s); ports.append(p)
while len(ports) < want:            # no range below: the kernel's
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
    ports.append(s.getsockname()[1])
print(" ".join(map(str, ports)))
PY
}

# etcd_health URL [CURL ARGS...]: true once the member answers healthy.
etcd_health() {
  local url=$1
  shift
  curl -s --max-time 2 "$@" "$url/health" 2>/dev/null | grep -q '"health":"true"'
}

# etcd_wait_healthy URL SECONDS [CURL ARGS...]
etcd_wait_healthy() {
  local url=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 10; i++)); do
    etcd_health "$url" "$@" && return 0
    sleep 0.1
  done
  fail "etcd at $url not healthy after ${secs}s"
}

# start_etcd NAME [EXTRA ETCD ARGS...]: one single-member cluster; sets
# ETCD_EP (host:port), ETCD_URL and ETCD_PID_<NAME>.  Extra arguments may
# override the client URLs (TLS); set ETCD_SCHEME=https then.
start_etcd() {
  local name=$1 cport pport scheme=${ETCD_SCHEME:-http}
  shift
  read -r cport pport <<<"$(free_ports 2)"
  mkdir -p "$T/etcd-$name"
  etcd --name "$name" --data-dir "$T/etcd-$name/data" \
    --listen-client-urls "$scheme://127.0.0.1:$cport" \
    --advertise-client-urls "$scheme://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "$name=http://127.0.0.1:$pport" \
    --logger=zap --log-outputs=stderr "$@" >"$T/etcd-$name/log" 2>&1 &
  local pid=$!
  ETCD_PIDS+=("$pid")
  printf -v "ETCD_PID_$name" '%s' "$pid"
  ETCD_EP=127.0.0.1:$cport
  ETCD_URL=$scheme://127.0.0.1:$cport
}

# start_etcd_cluster N: an N-member cluster; sets ETCD_EPS (comma list),
# ETCD_MEMBER_URL[i], ETCD_MEMBER_PID[i] (i = 1..N).
start_etcd_cluster() {
  local n=$1 i ic="" ports
  read -r -a ports <<<"$(free_ports $((2 * n)))"
  ETCD_EPS=""
  for ((i = 1; i <= n; i++)); do
    ic+="${ic:+,}m$i=http://127.0.0.1:${ports[2 * i - 1]}"
  done
  for ((i = 1; i <= n; i++)); do
    local c=${ports[2 * i - 2]} p=${ports[2 * i - 1]}
    mkdir -p "$T/etcd-m$i"
    etcd --name "m$i" --data-dir "$T/etcd-m$i/data" \
      --listen-client-urls "http://127.0.0.1:$c" \
      --advertise-client-urls "http://127.0.0.1:$c" \
      --listen-peer-urls "http://127.0.0.1:$p" \
      --initial-advertise-peer-urls "http://127.0.0.1:$p" \
      --initial-cluster "$ic" --initial-cluster-token "cdrun-test-$$" \
      --initial-cluster-state new \
      --logger=zap --log-outputs=stderr >"$T/etcd-m$i/log" 2>&1 &
    ETCD_MEMBER_PID[i]=$!
    ETCD_PIDS+=("$!")
    ETCD_MEMBER_URL[i]=http://127.0.0.1:$c
    ETCD_EPS+="${ETCD_EPS:+,}127.0.0.1:$c"
  done
  for ((i = 1; i <= n; i++)); do
    etcd_wait_healthy "${ETCD_MEMBER_URL[i]}" 60
  done
}

# etcd_leader_index N: which of members 1..N leads (from
# /v3/maintenance/status: leader == member_id).
etcd_leader_index() {
  local n=$1 i out
  for ((i = 1; i <= n; i++)); do
    out=$(curl -s --max-time 2 -X POST -d '{}' \
            "${ETCD_MEMBER_URL[i]}/v3/maintenance/status") || continue
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d.get("leader") == d["header"]["member_id"] else 1)' "$out" 2>/dev/null && { echo "$i"; return 0; }
  done
  return 1
}

# stop_etcd_pid PID: SIGTERM, then SIGKILL after 5 s.
stop_etcd_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
