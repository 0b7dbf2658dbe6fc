#!/bin/bash
# integ-retry: the etcd back end has an open intermittent hang or lost node under load (issue 13)
# A three-member etcd cluster loses its leader (SIGKILL) while a 2-node
# job runs, and the agents were talking to that very member: they fail
# over to the survivors, the job does not notice (no restart, the same
# workers), and it finishes through the exit barrier on the survivors.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd_cluster 3
leader=""
for ((i = 0; i < 100; i++)); do
  leader=$(etcd_leader_index 3) && break
  sleep 0.1
done
[ -n "$leader" ] || fail "no etcd leader elected"
# The leader first: the agents start on it.
eps=127.0.0.1:${ETCD_MEMBER_URL[leader]##*:}
for ((i = 1; i <= 3; i++)); do
  [ "$i" -eq "$leader" ] || eps+=",127.0.0.1:${ETCD_MEMBER_URL[i]##*:}"
done

mkdir "$T/w"
conf=keepalive_interval=0.5,keepalive_misses=10
export LOGLEVEL=DEBUG
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$eps" --rdzv_id=ha --rdzv_conf="$conf" \
    "$TW" elastic "$T/w" 12
done
wait_files "$T/w/ws2.*" 2 60
w0=$(cat "$T/w/pid.0") w1=$(cat "$T/w/pid.1")
kill -KILL "${ETCD_MEMBER_PID[leader]}"
alive "$w0" && alive "$w1" ||
  skip "the workers ended before the leader was killed (machine too slow)"
# On a hang, show what the agents said (they run with LOGLEVEL=DEBUG).
for ((i = 0; i < 900; i++)); do
  alive "$AGENT_a" || alive "$AGENT_b" || break
  sleep 0.1
done
alive "$AGENT_a" || alive "$AGENT_b" &&
  { tail -n 30 "$T/a.err" "$T/b.err"; fail "the agents did not finish"; }
wait_exit "$AGENT_a" 10; rca=$RC
wait_exit "$AGENT_b" 10; rcb=$RC
[ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] ||
  { cat "$T/a.err" "$T/b.err"; fail "agents exited $rca/$rcb"; }
grep -q 'restarting' "$T/a.err" "$T/b.err" &&
  { cat "$T/a.err" "$T/b.err"; fail "the job noticed the lost leader"; }
expect_eq "same worker 0" "$(cat "$T/w/pid.0")" "$w0"
expect_eq "same worker 1" "$(cat "$T/w/pid.1")" "$w1"
expect_eq "restart count" "$(envval "$T/w/ws2.0" TORCHELASTIC_RESTART_COUNT)" 0
exit 0
