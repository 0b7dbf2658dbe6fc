#!/bin/bash
# Note [etcd outage]: etcd stalls under a running one-node job (SIGSTOP)
# for longer than half the agent's lease but less than all of it.  The
# agent says so once, with how long the lease has left if etcd has a
# leader (none expires while it has none), and when etcd
# answers again it says that too; the job goes on and ends 0.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
. "$(dirname "$0")/soft_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
mkdir "$T/w"
# A lease of 2 s x 6 = 12 s: the warning comes after 6 s of silence.
agent a --nnodes=1 --nproc_per_node=1 --rdzv_backend=etcd \
  --rdzv_endpoint="$ETCD_EP" --rdzv_id=outage \
  --rdzv_conf=keepalive_interval=2,keepalive_misses=6 "$TW" gate "$T/w"
wait_files "$T/w/pid.*.0.1" 1 60
kill -STOP "$ETCD_PID_e1"
# The truth about leases: none expires while etcd has no leader.
wait_grep "no lease keepalive has reached etcd for [0-9.]+ s.*if etcd has a leader the lease expires in [0-9.]+ s unless one does.*while it has none, no lease expires" "$T/a.err" 60
kill -CONT "$ETCD_PID_e1"
wait_grep "etcd answers again: the lease was renewed after [0-9.]+ s without a keepalive" "$T/a.err" 60
touch "$T/w/go"
wait_exit "$AGENT_a" 60
[ "$RC" -eq 0 ] || { cat "$T/a.err"; fail "the agent exited $RC"; }
[ "$(grep -c 'no lease keepalive has reached' "$T/a.err")" -eq 1 ] ||
  fail "the outage was reported more than once"
exit 0
