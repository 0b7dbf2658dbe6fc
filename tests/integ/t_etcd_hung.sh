#!/bin/bash
# A hung etcd member (SIGSTOP: it accepts connections and never answers,
# as during a long GC, a disk stall or a half-open network), listed first
# in --rdzv_endpoint, costs an agent half a second (Note [a hung member],
# launcher/etcd_client.c), not the whole request timeout (10 s): a new
# job starts, and a node joins a running job, each within a join timeout
# of 8 s, which a request that waited out the hung member could not.
# Every step waits for an event (files, exits), never a time.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd_cluster 3
etcd_leader() {
  local i l
  for ((i = 0; i < 300; i++)); do
    l=$(etcd_leader_index 3) && { echo "$l"; return 0; }
    sleep 0.1
  done
  fail "no etcd leader elected"
}
port_of() { echo "${ETCD_MEMBER_URL[$1]##*:}"; }
leader=$(etcd_leader)
hung=$((leader % 3 + 1))
eps=127.0.0.1:$(port_of "$hung")
for ((i = 1; i <= 3; i++)); do
  [ "$i" -eq "$hung" ] || eps+=",127.0.0.1:$(port_of "$i")"
done
conf=join_timeout=8,last_call_timeout=0.5
export LOGLEVEL=DEBUG

# 1. A new job while the first member hangs.
kill -STOP "${ETCD_MEMBER_PID[hung]}"
mkdir "$T/n"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$eps" --rdzv_id=new --rdzv_conf="$conf" "$TW" env "$T/n"
done
wait_exit "$AGENT_a" 60; rca=$RC
wait_exit "$AGENT_b" 60; rcb=$RC
[ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] ||
  { tail -n 30 "$T/a.err" "$T/b.err"; fail "a new job with a hung member: agents exited $rca/$rcb"; }
check_world "$T/n" env 2
kill -CONT "${ETCD_MEMBER_PID[hung]}"

# 2. A node joins a running job while the first member hangs (the job's
# agents were using it: their watches and keepalives leave it too).
etcd_wait_healthy "${ETCD_MEMBER_URL[hung]}" 30
mkdir "$T/j"
for n in c d; do
  agent "$n" --nnodes=2:3 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$eps" --rdzv_id=join --rdzv_conf="$conf" "$TW" gate "$T/j"
done
wait_files "$T/j/pid.*.0.2" 2 60
kill -STOP "${ETCD_MEMBER_PID[hung]}"
agent e --nnodes=2:3 --nproc_per_node=1 --rdzv_backend=etcd \
  --rdzv_endpoint="$eps" --rdzv_id=join --rdzv_conf="$conf" "$TW" gate "$T/j"
for ((i = 0; i < 1200; i++)); do
  [ "$(compgen -G "$T/j/pid.*.0.3" | wc -l)" -ge 3 ] && break
  alive "$AGENT_e" || break
  sleep 0.05
done
[ "$(compgen -G "$T/j/pid.*.0.3" | wc -l)" -ge 3 ] ||
  { tail -n 30 "$T/c.err" "$T/e.err"; fail "a join with a hung member did not make a round of 3"; }
touch "$T/j/go"
for n in c d e; do
  pid=AGENT_$n
  wait_exit "${!pid}" 60
  [ "$RC" -eq 0 ] || { tail -n 30 "$T/$n.err"; fail "agent $n exited $RC"; }
done
kill -CONT "${ETCD_MEMBER_PID[hung]}"
exit 0
