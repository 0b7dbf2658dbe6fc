#!/bin/bash
# The etcd back end is elastic like c10d: nodes with unequal nproc get
# rank offsets that follow their group ranks; a late node scales a running
# job up (everyone restarts, no restart counted); an agent SIGKILLed is
# noticed when its lease expires and the survivor restarts alone; below
# min the survivor fails after join_timeout.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
ep=$ETCD_EP
# Lease TTL = keepalive_interval x keepalive_misses = 2 s (etcd's minimum).
conf=last_call_timeout=0.5,join_timeout=10,keepalive_interval=0.5,keepalive_misses=4

mkdir "$T/up"
agent a --nnodes=1:2 --nproc_per_node=2 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=el --rdzv_conf="$conf" --max_restarts=0 "$TW" elastic "$T/up" 60
wait_files "$T/up/ws2.*" 2 30
expect_eq "first round restart count" \
  "$(envval "$T/up/ws2.0" TORCHELASTIC_RESTART_COUNT)" 0
agent b --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=el --rdzv_conf="$conf" --max_restarts=0 "$TW" elastic "$T/up" 60
wait_files "$T/up/ws3.*" 3 30
# Unequal nproc: a (2 workers) keeps group rank 0, b (1 worker) gets rank 2.
check_world "$T/up" ws3 3
expect_eq "b's group rank" "$(envval "$T/up/ws3.2" GROUP_RANK)" 1
expect_eq "a's local world" "$(envval "$T/up/ws3.0" LOCAL_WORLD_SIZE)" 2
expect_eq "scale-up is no restart" \
  "$(envval "$T/up/ws3.0" TORCHELASTIC_RESTART_COUNT)" 0
expect_grep 'restarting the worker group: .*joined' "$T/a.err"

# Scale down: SIGKILL agent b; its lease expires, a restarts alone.
rm -f "$T"/up/ws2.*
kill -KILL "$AGENT_b"
wait_files "$T/up/ws2.*" 2 30
check_world "$T/up" ws2 2
expect_grep 'restarting the worker group: .*lost' "$T/a.err"
kill -TERM "$AGENT_a"
wait_exit "$AGENT_a" 30

# A full round: a third node waits as a spare and takes the place of a
# node that dies.
mkdir "$T/sp"
for n in e f; do
  agent "$n" --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
    --rdzv_id=sp --rdzv_conf="$conf" "$TW" elastic "$T/sp" 60
done
wait_files "$T/sp/ws2.*" 2 30
agent g --nnodes=1:2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=sp --rdzv_conf="$conf" "$TW" elastic "$T/sp" 60
for ((i = 0; i < 600; i++)); do
  grep -q 'is full' "$T/g.err" && break
  sleep 0.05
done
expect_grep "rendezvous 'sp': round 0 is full \(2 of at most 2 nodes\)" "$T/g.err"
pf=$(cat "$T/sp/pid.1")
rm -f "$T"/sp/ws2.*
kill -KILL "$AGENT_f"
wait_files "$T/sp/ws2.*" 2 30
check_world "$T/sp" ws2 2
[ "$(cat "$T/sp/pid.1")" != "$pf" ] || fail "rank 1 did not restart"
alive "$AGENT_g" || fail "the spare exited"
expect_grep 'restarting the worker group: .*lost' "$T/e.err"
kill -TERM "$AGENT_e" "$AGENT_g"
wait_exit "$AGENT_e" 30
wait_exit "$AGENT_g" 30

# Below min: min 2, one node dies, the survivor waits join_timeout, fails
# (with a restart left: Note [a lost node], rdzvd/rdzv_rules.h).
mkdir "$T/min"
conf2=last_call_timeout=0.5,join_timeout=4,keepalive_interval=0.5,keepalive_misses=4
agent c --nnodes=2:2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=min --rdzv_conf="$conf2" --max_restarts=1 "$TW" elastic "$T/min" 60
agent d --nnodes=2:2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_endpoint="$ep" \
  --rdzv_id=min --rdzv_conf="$conf2" --max_restarts=1 "$TW" elastic "$T/min" 60
wait_files "$T/min/ws2.*" 2 30
kill -KILL "$AGENT_d"
wait_exit "$AGENT_c" 60
[ "$RC" -ne 0 ] || fail "the survivor below min exited 0"
expect_grep 'join_timeout' "$T/c.err"
exit 0
