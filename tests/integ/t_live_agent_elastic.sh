#!/bin/bash
# cdrun --recovery=live in an elastic job on rdzvd (workers of
# live_agent_lib.sh): a node joining leaves the running workers untouched
# and their round file says the larger world; a node lost (its agent
# SIGKILLed) leaves the survivor's workers running with a round file that
# says the smaller world; the master's node lost moves the master
# endpoint, and the survivor's workers go on with rdzvd's live store; below
# min_nodes the survivor waits with its workers running, and a newcomer
# completes the round around them, or a final failure ends it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_agent_lib.sh"

start_rdzvd
ep=127.0.0.1:$RDZVD_PORT
conf=last_call_timeout=0.5,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5
common=(--nnodes=1:3 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=live
        --rdzv_conf="$conf" --recovery=live --max_restarts=0 --no_python)


mkdir "$T/a" "$T/b" "$T/c"
agent a "${common[@]}" --nproc_per_node=2 "$LW" "$T/a"
wait_files "$T/a/round.*" 2 30
a0=$(pid_of "$T/a" 0); a1=$(pid_of "$T/a" 1)
round_of "$T/a" "$a0" "round=0 world=2 rank_offset=0 local_world=2" 10

# ---- b joins: a's workers go on, in a world of 3 ----
agent b "${common[@]}" --nproc_per_node=1 "$LW" "$T/b"
joined_live a b
expect_eq "a's rank 1 untouched" "$(pid_of "$T/a" 1)" "$a1"
expect_grep "re-joining with the workers running \(live recovery\)" "$T/a.err"
expect_grep "round 1: world 3 on 2 nodes" "$T/a.err"

# ---- b lost: a's workers go on, in a world of 2 ----
kill -KILL "$AGENT_b"
wait_exit "$AGENT_b" 20
round_of "$T/a" "$a0" "round=2 world=2 rank_offset=0 local_world=2" 30
round_of "$T/a" "$a1" "round=2 world=2 rank_offset=0 local_world=2" 30
alive "$a0" && alive "$a1" || fail "a survivor's worker died"
expect_eq "a's rank 0 untouched" "$(pid_of "$T/a" 0)" "$a0"
expect_eq "a's rank 1 untouched" "$(pid_of "$T/a" 1)" "$a1"
grep -q "restarting the worker group" "$T/a.err" && fail "a restarted its workers"

# ---- c joins, then a (the master's node) is lost: c's workers go on ----
# (Note [live store in rdzvd]: rdzvd serves the live store, every worker
# has it in CDRUN_LIVE_STORE, and the round that moves the master
# endpoint keeps the workers.)
agent c "${common[@]}" --nproc_per_node=1 "$LW" "$T/c"
wait_files "$T/c/round.*" 1 30
c0=$(pid_of "$T/c" 2)
round_of "$T/c" "$c0" "round=3 world=3 rank_offset=2 local_world=1" 30
round_of "$T/a" "$a0" "round=3 world=3 rank_offset=0 local_world=2" 30
sport=$(sed -n 's/.*job live: live store on port \([0-9]*\)$/\1/p' "$T/rdzvd.log" | tail -1)
[ -n "$sport" ] || fail "rdzvd served no live store"
for f in "$T"/a/env.0.* "$T"/c/env.2.*; do
  expect_grep "^CDRUN_LIVE_STORE=127.0.0.1:$sport\$" "$f"
done
kill -KILL "$AGENT_a"
wait_exit "$AGENT_a" 20
round_of "$T/c" "$c0" "round=4 world=1 rank_offset=0 local_world=1" 30
alive "$c0" || fail "c's worker died when the master's node was lost"
expect_eq "c's worker untouched" "$(pid_of "$T/c" 2)" "$c0"
[ -z "$(compgen -G "$T/c/env.0.*")" ] || fail "c started a new worker"
grep -q "restarting them" "$T/c.err" && fail "c restarted its workers"
expect_grep "round 4: world 1 on 1 node, .* the workers go on" "$T/c.err"
touch "$T/c/stop"
wait_exit "$AGENT_c" 30
expect_eq "c's exit" "$RC" 0

# ---- below min_nodes: the survivor waits with its workers running ----
mkdir "$T/d" "$T/e" "$T/g"
# (A restart is left: with none, the loss would end the job, below.)
min=(--nnodes=2:3 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=min
     --rdzv_conf="$conf" --recovery=live --max_restarts=1 --no_python
     --nproc_per_node=1)
agent d "${min[@]}" "$LW" "$T/d"
wait_grep "job min: .* joined round 0" "$T/rdzvd.log" 30   # d ranks first
agent e "${min[@]}" "$LW" "$T/e"
wait_files "$T/d/round.*" 1 30
wait_files "$T/e/round.*" 1 30
d0=$(pid_of "$T/d" 0)
round_of "$T/d" "$d0" "round=0 world=2 rank_offset=0 local_world=1" 30
kill -KILL "$AGENT_e"
wait_exit "$AGENT_e" 20
wait_grep "re-joining with the workers running" "$T/d.err" 30
alive "$d0" || fail "the survivor's worker died below min_nodes"
expect_eq "d's round below min" "$(cat "$T/d/round.$d0")" \
  "round=0 world=2 rank_offset=0 local_world=1"
agent g "${min[@]}" "$LW" "$T/g"
round_of "$T/d" "$d0" "round=1 world=2 rank_offset=0 local_world=1" 30
expect_eq "d's worker untouched" "$(pid_of "$T/d" 0)" "$d0"
wait_files "$T/g/round.*" 1 30
touch "$T/d/stop" "$T/g/stop"
wait_exit "$AGENT_d" 30
expect_eq "d's exit" "$RC" 0
wait_exit "$AGENT_g" 30
expect_eq "g's exit" "$RC" 0

# ---- below min_nodes with no restart left: the loss ends the job ----
# (Note [a lost node], rdzvd/rdzv_rules.h: the job can no longer reach
# its size.)
mkdir "$T/h" "$T/i"
fin=(--nnodes=2:3 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=fin
     --rdzv_conf="$conf" --recovery=live --max_restarts=0 --no_python
     --nproc_per_node=1)
agent h "${fin[@]}" "$LW" "$T/h"
wait_grep "job fin: .* joined round 0" "$T/rdzvd.log" 30
agent i "${fin[@]}" "$LW" "$T/i"
wait_files "$T/h/round.*" 1 30
wait_files "$T/i/round.*" 1 30
h0=$(pid_of "$T/h" 0)
kill -KILL "$AGENT_i"
wait_exit "$AGENT_i" 20
wait_exit "$AGENT_h" 30
expect_eq "h's exit (a lost node)" "$RC" 75
expect_grep "the job cannot reach its size \(1 of 2 nodes\) and no restart is left" "$T/h.err"
grep -q "re-joining with the workers running" "$T/h.err" &&
  fail "h gathered again for a job that cannot go on"
alive "$h0" && fail "h's worker outlived the job"
exit 0
