#!/bin/bash
# What a job costs etcd in writes (each a raft entry etcd commits, a failed
# compare-and-swap included): 8 agents join, run, pass the exit barrier
# and leave with one helper applying the others' requests (Note [one
# helper], launcher/rdzv_etcd.c), alive keys rewritten only when they
# change, and a finished job left by revoking (Note [leaving a finished
# job]): about 3 writes per agent (25-27 in all), where every agent
# writing what it saw took 11-12 (94).  LOGLEVEL=DEBUG logs every answer; the scenario counts them.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30
n=8
mkdir "$T/w"
for ((i = 0; i < n; i++)); do
  LOGLEVEL=DEBUG agent "a$i" --nnodes=$n --nproc_per_node=1 \
    --rdzv_backend=etcd --rdzv_endpoint="$ETCD_EP" --rdzv_id=wr \
    "$TW" env "$T/w"
done
for ((i = 0; i < n; i++)); do
  pid=AGENT_a$i
  wait_exit "${!pid}" 60
  [ "$RC" -eq 0 ] || { tail -n 20 "$T/a$i.err"; fail "agent a$i exited $RC"; }
done
check_world "$T/w" env $n
writes=$(cat "$T"/a*.err | grep -cE '/v3/kv/(txn|put) -> HTTP')
echo "writes for $n agents: $writes" >&2
[ "$writes" -le $((8 * n)) ] || fail "$writes writes to etcd for $n agents (at most $((8 * n)))"
exit 0
