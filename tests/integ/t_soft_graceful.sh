#!/bin/bash
# Soft state around planned and embedded rendezvous hosts:
#  1. SIGTERM to rdzvd: it tells its agents GOING_AWAY before closing;
#     they reconnect at once to the successor started on the same port
#     and the job goes on untouched;
#  2. an embedded host (the rendezvous inside node 0's agent) is killed:
#     the other agents say so by name, and fail after reconnect_timeout
#     (3 s, shorter than their wait for a host: Note [a lost host]);
#  3. a hosting agent that restarts within the others' wait for it hosts
#     again; the others come back to it and the job goes on with a new
#     round.  The job has no restart left, so that wait is one keepalive
#     window and 2 s (Note [a lost host], rdzvd/rdzv_rules.h): the window
#     is 30 s here, so that a loaded machine's restart is within it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"

# ---- 1. graceful stop ------------------------------------------------------
start_rdzvd
port=$RDZVD_PORT ep=127.0.0.1:$port w=$T/w1
three_agents graceful "$w"
wait_files "$w/pid.*.0.3" 3 60
old=$(cat "$w"/pid.*.0.3)
kill_rdzvd TERM
expect_grep "SIGTERM: shutting down" "$T/rdzvd.log"
for n in a b c; do
  wait_grep "going away: the rendezvous server 127.0.0.1:$port: rdzvd is stopping \(SIGTERM\); workers keep running" "$T/$n.err" 30
  grep -q "lost the rendezvous server" "$T/$n.err" &&
    fail "agent $n timed out instead of hearing GOING_AWAY"
done
rdzvd_on "$port" "$T/rdzvd1.log"
wait_grep "job graceful: round 0 rebuilt" "$T/rdzvd1.log" 30
expect_eq "worker pids" "$(cat "$w"/pid.*.0.3)" "$old"
touch "$w/go"
for n in a b c; do expect_exit "$n" 60 0; done
kill_rdzvd TERM

# ---- 2. the embedded host dies ------------------------------------------
port=$(free_port) ep=127.0.0.1:$port w=$T/w2
mkdir -p "$w"
agent a --nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="$ep" --rdzv_id=emb --rdzv_conf=is_host=1,reconnect_timeout=3 \
  "$TW" gate "$w"
wait_grep "hosting the rendezvous" "$T/a.err" 30
for n in b c; do
  agent "$n" --nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="$ep" --rdzv_id=emb \
    --rdzv_conf=is_host=0,reconnect_timeout=3 "$TW" gate "$w"
done
wait_files "$w/pid.*.0.3" 3 60
kill -9 "$AGENT_a"
wait_exit "$AGENT_a" 30
for n in b c; do
  v=AGENT_$n
  wait_exit "${!v}" 60
  [ "$RC" -ne 0 ] || fail "agent $n exited 0 without its rendezvous host"
  expect_grep "the rendezvous host 127.0.0.1:$port \(embedded in the agent of node [0-9]+\) is gone" "$T/$n.err"
  expect_grep "embedded in the agent of node [0-9]+\) did not come back within 3 s" "$T/$n.err"
done

# ---- 3. the hosting agent restarts -------------------------------------
port=$(free_port) ep=127.0.0.1:$port w=$T/w3
mkdir -p "$w"
host_args=(--nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d
  --rdzv_endpoint="$ep" --rdzv_id=emb3
  --rdzv_conf=is_host=1,keepalive_misses=30 "$TW" gate "$w")
agent a "${host_args[@]}"
wait_grep "hosting the rendezvous" "$T/a.err" 30
for n in b c; do
  agent "$n" --nnodes=3 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="$ep" --rdzv_id=emb3 \
    --rdzv_conf=is_host=0,keepalive_misses=30 "$TW" gate "$w"
done
wait_files "$w/pid.*.0.3" 3 60
declare -A before
for r in 0 1 2; do before[$r]=$(pid_of "$w" $r 0 3); done
kill -9 "$AGENT_a"
wait_exit "$AGENT_a" 30
for n in b c; do
  wait_grep "the rendezvous host 127.0.0.1:$port \(embedded in the agent of node [0-9]+\) is gone" "$T/$n.err" 30
done
mv "$T/a.err" "$T/a1.err"
agent a "${host_args[@]}"
wait_grep "hosting the rendezvous" "$T/a.err" 30
for n in b c; do
  wait_grep "reconnected to the rendezvous server 127.0.0.1:$port" "$T/$n.err" 60
done
# A new round of three: every rank runs a new worker.
for ((i = 0; i < 1200; i++)); do
  new=0
  for r in 0 1 2; do
    p=$(pid_of "$w" $r 0 3 2>/dev/null)
    [ -n "$p" ] && [ "$p" != "${before[$r]}" ] && alive "$p" && new=$((new + 1))
  done
  [ "$new" -eq 3 ] && break
  sleep 0.05
done
[ "$new" -eq 3 ] || fail "no new round of three after the host came back"
touch "$w/go"
for n in a b c; do expect_exit "$n" 60 0; done
exit 0
