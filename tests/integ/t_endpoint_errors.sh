#!/bin/bash
# An endpoint that is not (or no longer) a rendezvous server is a clear
# error within the join timeout or the reconnect timeout, never a loop
# (Note [first connection], Note [foreign protocol] in
# rdzv_client_conn.c):
# 1. nothing listens (is_host=0): said at once, then a failure at the join
#    timeout naming the address;
# 2. a listener that accepts and stays silent: the join timeout, naming
#    what it found;
# 3. rdzvd dies under a running job and a silent listener takes its port:
#    each reconnection reaches it, none is taken for a success, and the
#    agent gives up at reconnect_timeout saying why.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"

# silent PORT FILE: a loopback listener on PORT (0: any) that accepts and
# never answers; the port it got goes to FILE.
silent() {
  python3 - "$1" "$2" <<'PY' &
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
for _ in range(200):
    try:
        s.bind(("127.0.0.1", int(sys.argv[1])))
        break
    except OSError:
        time.sleep(0.05)
s.listen(64)
open(sys.argv[2] + ".tmp", "w").write(str(s.getsockname()[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
held = []
while True:
    c, _ = s.accept()
    held.append(c)
PY
  STARTED+=($!)
  SILENT_PID=$!
  wait_files "$2" 1 30
}

conf=join_timeout=4,keepalive_interval=0.5,keepalive_misses=2,is_host=0

# 1. Nothing listens: a port that was free a moment ago.
free=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
agent none --nnodes=1 --rdzv_backend=c10d --rdzv_id=n \
  --rdzv_endpoint="127.0.0.1:$free" --rdzv_conf="$conf" "$TW" env "$T"
wait_grep "cannot reach the rendezvous at 127\.0\.0\.1:$free yet: connection refused; retrying until the join timeout \(4 s\)" "$T/none.err" 30
alive "$AGENT_none" || fail "the agent gave up at the first refusal"
expect_exit none 60 1
expect_grep "cannot reach the rendezvous at 127\.0\.0\.1:$free within the join timeout \(4 s\): connection refused" "$T/none.err"

# 2. A silent listener.
silent 0 "$T/silent.port"
sp=$(cat "$T/silent.port")
agent quiet --nnodes=1 --rdzv_backend=c10d --rdzv_id=q \
  --rdzv_endpoint="127.0.0.1:$sp" --rdzv_conf="$conf" "$TW" env "$T"
expect_exit quiet 60 1
expect_grep "cannot reach the rendezvous at 127\.0\.0\.1:$sp .*it accepted the connection but never spoke rdzvd's protocol \(no answer for 1\.0 s\)" "$T/quiet.err"
kill "$SILENT_PID"

# 3. rdzvd gone, a silent listener on its port.
start_rdzvd
port=$RDZVD_PORT
mkdir -p "$T/w"
agent run --nnodes=1 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=r \
  --rdzv_conf=keepalive_interval=0.5,keepalive_misses=2,reconnect_timeout=6 \
  "$TW" gate "$T/w"
wait_files "$T/w/pid.*.0.1" 1 60
kill_rdzvd KILL
silent "$port" "$T/silent2.port"
expect_exit run 60 1
expect_grep "lost the rendezvous server 127\.0\.0\.1:$port" "$T/run.err"
expect_grep "did not come back within 6 s \(reconnect_timeout\): the endpoint accepted the connection but never spoke rdzvd's protocol \(.*\)" "$T/run.err"
grep -q "reconnected to the rendezvous server" "$T/run.err" &&
  fail "a connection to the silent listener was taken for a reconnection"
exit 0
