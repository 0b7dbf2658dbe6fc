#!/bin/bash
# cdrun --recovery=live on the etcd back end (a real etcd), workers of
# live_agent_lib.sh: a SIGKILLed worker is replaced alone, its peer
# untouched and nothing reported; a node joining leaves the running
# workers untouched, their round file saying the larger world (the
# newcomer gets the same job token and live store); a node lost (its agent
# SIGKILLed, noticed when its lease expires) leaves the survivor's workers
# running, their round file saying the smaller world; node 0 lost (node 0
# serves the live store with etcd): the survivor restarts its workers.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_agent_lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
# Lease TTL = keepalive_interval x keepalive_misses = 2 s (etcd's minimum).
conf=last_call_timeout=0.5,join_timeout=30,keepalive_interval=0.5,keepalive_misses=4
common=(--nnodes=1:3 --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP"
        --rdzv_id=live --rdzv_conf="$conf" --recovery=live --max_restarts=1
        --no_python)


mkdir "$T/a" "$T/b"
agent a "${common[@]}" --nproc_per_node=2 "$LW" "$T/a"
wait_files "$T/a/round.*" 2 30
a0=$(pid_of "$T/a" 0); a1=$(pid_of "$T/a" 1)
round_of "$T/a" "$a0" "round=0 world=2 rank_offset=0 local_world=2" 10

# ---- a worker replaced alone ----
kill -KILL "$a1"
wait_files "$T/a/env.1.*" 2 30
wait_files "$T/a/round.*" 3 30
expect_grep "replacing worker 1 alone \(live recovery" "$T/a.err"
expect_eq "peer untouched" "$(pid_of "$T/a" 0)" "$a0"
alive "$a0" || fail "the replaced worker's peer died"
grep -q "restarting the worker group" "$T/a.err" && fail "a restarted its group"
for f in "$T"/a/pid.1.*; do
  [ "$f" = "$T/a/pid.1.$a1" ] || a1=$(cat "$f")
done

# ---- b joins: a's workers go on, in a world of 3 ----
agent b "${common[@]}" --nproc_per_node=1 "$LW" "$T/b"
joined_live a b
expect_grep "re-joining with the workers running \(live recovery\)" "$T/a.err"

# ---- b lost: a's workers go on, in a world of 2 ----
kill -KILL "$AGENT_b"
wait_exit "$AGENT_b" 20
round_of "$T/a" "$a0" "round=2 world=2 rank_offset=0 local_world=2" 30
round_of "$T/a" "$a1" "round=2 world=2 rank_offset=0 local_world=2" 30
alive "$a0" && alive "$a1" || fail "a survivor's worker died"
grep -q "restarting the worker group" "$T/a.err" && fail "a restarted its workers"
kill -KILL "$b0" 2>/dev/null

# ---- c joins, then a (node 0) is lost: with etcd node 0 serves the live
# store, so c restarts its workers, saying why (only rdzvd keeps the
# store through node 0's loss: Note [live store in rdzvd]) ----
mkdir "$T/c"
agent c "${common[@]}" --nproc_per_node=1 "$LW" "$T/c"
wait_files "$T/c/round.*" 1 30
c0=$(pid_of "$T/c" 2)
wait_grep "world=3 rank_offset=2 local_world=1" "$T/c/round.$c0" 30
kill -KILL "$AGENT_a"
wait_exit "$AGENT_a" 20
wait_files "$T/c/env.0.*" 1 30
expect_grep "moves the master endpoint or the live store, or restarts the job .*restarting them" "$T/c.err"
alive "$c0" && fail "c's old worker survived node 0's loss"
touch "$T/c/stop"
wait_exit "$AGENT_c" 30
expect_eq "c's exit" "$RC" 0
exit 0
