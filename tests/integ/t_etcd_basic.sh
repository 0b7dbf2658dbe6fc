#!/bin/bash
# The etcd back end on a real etcd: a 2x2 job completes with one
# consistent world (ranks, offsets, master) and both agents exit 0.  As
# with rdzvd, the finished job is kept close_timeout seconds (here 30,
# the default, on a lease of that TTL): a late agent is told it finished.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30

mkdir "$T/w"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=2 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EP" --rdzv_id=job2x2 \
    "$TW" env "$T/w"
done
wait_exit "$AGENT_a" 60; rca=$RC
wait_exit "$AGENT_b" 60; rcb=$RC
[ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] ||
  { cat "$T/a.err" "$T/b.err"; fail "agents exited $rca/$rcb"; }
check_world "$T/w" env 4
for r in 0 1 2 3; do
  expect_eq "rank $r restart count" \
    "$(envval "$T/w/env.$r" TORCHELASTIC_RESTART_COUNT)" 0
done
keys() {
  ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" get --prefix /cdrun/rdzv/job2x2/ \
    --keys-only | grep -c .
}
# Only the marker is left: the state, finished, with no node, on a lease.
expect_eq "keys left in etcd" "$(keys)" 1
st=$(ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" get /cdrun/rdzv/job2x2/state \
       --print-value-only)
case $st in *'"phase":"finished"'*'"nodes":[]'*) ;;
  *) fail "the kept state is not a finished job without nodes: $st" ;; esac
lease=$(ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" get /cdrun/rdzv/job2x2/state \
          -w json | python3 -c 'import json,sys; print("%x" % json.load(sys.stdin)["kvs"][0].get("lease", 0))')
[ "$lease" != 0 ] || fail "the finished job's state has no lease"
expect_grep 'granted with TTL\(30s\)' <(ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" \
  lease timetolive "$lease")
# A late agent is refused, saying the job finished (rdzvd's answer too).
agent late --nnodes=2 --nproc_per_node=2 --rdzv_backend=etcd \
  --rdzv_endpoint="$ETCD_EP" --rdzv_id=job2x2 "$TW" env "$T/late"
wait_exit "$AGENT_late" 60
[ "$RC" -ne 0 ] || fail "a late agent joined a finished job"
expect_grep "job2x2.*refused the join: the job has finished" "$T/late.err"
exit 0
