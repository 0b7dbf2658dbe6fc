#!/bin/bash
# integ-retry: the etcd back end has an open intermittent hang or lost node under load (issue 13)
# The etcd back end on a real etcd: a 2x2 job completes with one
# consistent world (ranks, offsets, master) and both agents exit 0; the
# job's state is gone from etcd once every node left.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd e1
etcd_wait_healthy "$ETCD_URL" 30

mkdir "$T/w"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=2 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EP" --rdzv_id=job2x2 "$TW" env "$T/w"
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
left=$(ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" get --prefix /cdrun/rdzv/job2x2/ --keys-only | grep -c .)
expect_eq "keys left in etcd" "$left" 0
exit 0
