#!/bin/bash
# Elasticity: a late node scales a running job up (everyone restarts with
# the larger world); an agent SIGKILLed scales it down (the survivor
# restarts with the smaller world); below min the survivor waits for
# join_timeout and fails with a clear message.
. "$(dirname "$0")/lib.sh"

start_rdzvd
ep=127.0.0.1:$RDZVD_PORT
conf=last_call_timeout=0.5,join_timeout=5,keepalive_interval=0.2,keepalive_misses=5

mkdir "$T/up"
agent a --nnodes=1:2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=el --rdzv_conf="$conf" --max_restarts=0 "$TW" elastic "$T/up" 60
wait_files "$T/up/ws2.*" 2 20
agent b --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=el --rdzv_conf="$conf" --max_restarts=0 "$TW" elastic "$T/up" 60
wait_files "$T/up/ws3.*" 3 20
check_world "$T/up" ws3 3
expect_grep 'restarting the worker group: .*joined' "$T/a.err"

# Scale down: SIGKILL agent b; a restarts alone with WORLD_SIZE 2 again.
rm -f "$T"/up/ws2.*
kill -KILL "$AGENT_b"
wait_files "$T/up/ws2.*" 2 20
check_world "$T/up" ws2 2
expect_grep 'restarting the worker group: .*lost' "$T/a.err"
kill -TERM "$AGENT_a"
wait_exit "$AGENT_a" 20

# Below min: min 2, one node dies, the survivor waits join_timeout, fails
# (with a restart left: Note [a lost node], rdzvd/rdzv_rules.h).
mkdir "$T/min"
agent c --nnodes=2:2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=min --rdzv_conf="$conf" --max_restarts=1 "$TW" elastic "$T/min" 60
agent d --nnodes=2:2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$ep" \
  --rdzv_id=min --rdzv_conf="$conf" --max_restarts=1 "$TW" elastic "$T/min" 60
wait_files "$T/min/ws2.*" 2 20
kill -KILL "$AGENT_d"
wait_exit "$AGENT_c" 30
[ "$RC" -ne 0 ] || fail "the survivor below min exited 0"
expect_grep 'join_timeout' "$T/c.err"
exit 0
