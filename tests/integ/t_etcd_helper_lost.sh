#!/bin/bash
# Note [what an agent watches] (launcher/rdzv_etcd.c): only the helper
# (the agent with the oldest alive key, Note [one helper]) watches the
# other agents' requests and removes dead nodes; the others watch the
# state and the alive keys' deletes.  SIGKILL the helper of a running
# 3-node job: when its lease expires, the next oldest agent must read the
# job again and remove it ("lost"), and the two survivors restart as a
# 2-node world; a fourth agent then joins through the new helper.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
# Lease TTL = keepalive_interval x keepalive_misses = 2 s (etcd's minimum).
conf=last_call_timeout=0.5,join_timeout=20,keepalive_interval=0.5,keepalive_misses=4
mkdir "$T/w"

# start NAME: an agent of the job; returns once it waits in the etcd job
# (so that the agents' alive keys are created in this order).
start() {
  agent "$1" --nnodes=2:4 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EP" --rdzv_id=hl --rdzv_conf="$conf" \
    --max_restarts=3 "$TW" elastic "$T/w" 120
  local i
  for ((i = 0; i < 600; i++)); do
    grep -qE 'waiting for nodes|present|restarting|is full' "$T/$1.err" &&
      return 0
    alive "$(eval echo "\$AGENT_$1")" || break
    sleep 0.05
  done
  cat "$T/$1.err"
  fail "agent $1 did not join"
}

start h1
start h2
start h3
wait_files "$T/w/ws3.*" 3 30
check_world "$T/w" ws3 3

# The helper (h1, the oldest alive key) dies without a word.
rm -f "$T"/w/ws2.*
kill -KILL "$AGENT_h1"
wait_files "$T/w/ws2.*" 2 30
check_world "$T/w" ws2 2
expect_grep 'restarting the worker group: .*lost' "$T/h2.err"
expect_grep 'restarting the worker group: .*lost' "$T/h3.err"

# A new node joins through the new helper (h2).
rm -f "$T"/w/ws3.*
start h4
wait_files "$T/w/ws3.*" 3 30
check_world "$T/w" ws3 3
kill -TERM "$AGENT_h2" "$AGENT_h3" "$AGENT_h4"
wait_exit "$AGENT_h2" 30
wait_exit "$AGENT_h3" 30
wait_exit "$AGENT_h4" 30
exit 0
