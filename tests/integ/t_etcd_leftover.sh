#!/bin/bash
# Nothing of a job is left in etcd when every one of its agents is
# SIGKILLed (Note [the job's lease], launcher/rdzv_etcd.c): the job
# document lives under a lease its agents keep alive, so once they are
# gone etcd deletes it with their alive keys, one lease TTL later.  A job
# that ends normally leaves only its marker, under a lease of its own, and
# no lease it does not use.  On a three-member cluster.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd_cluster 3
ectl() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EPS" "$@"; }
# TTL 2 s (etcd's minimum).
conf=keepalive_interval=0.5,keepalive_misses=4,last_call_timeout=0.5

mkdir "$T/w"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EPS" --rdzv_id=lo --rdzv_conf="$conf" \
    "$TW" gate "$T/w"
done
wait_files "$T/w/pid.*.0.2" 2 60
[ -n "$(ectl get --prefix /cdrun/rdzv/lo/ --keys-only)" ] ||
  fail "no key of the running job"
kill -KILL "$AGENT_a" "$AGENT_b"
wait_exit "$AGENT_a" 10
wait_exit "$AGENT_b" 10
# The leases expire (2 s); no key of the job stays.
for ((i = 0; i < 600; i++)); do
  [ -z "$(ectl get --prefix /cdrun/rdzv/lo/ --keys-only)" ] && break
  sleep 0.1
done
left=$(ectl get --prefix /cdrun/rdzv/lo/ --keys-only)
[ -z "$left" ] || fail "keys of the killed job left in etcd: $left"

# A job that ends: its marker (close_timeout) and nothing else.
before=$(ectl lease list | grep -cE '^[0-9a-f]+$')
mkdir "$T/f"
for n in c d; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EPS" --rdzv_id=fin --rdzv_conf="$conf" \
    "$TW" env "$T/f"
done
wait_exit "$AGENT_c" 60; rcc=$RC
wait_exit "$AGENT_d" 60; rcd=$RC
[ "$rcc" -eq 0 ] && [ "$rcd" -eq 0 ] ||
  { cat "$T/c.err" "$T/d.err"; fail "agents exited $rcc/$rcd"; }
expect_eq "keys of the finished job" \
  "$(ectl get --prefix /cdrun/rdzv/fin/ --keys-only | grep -v '^$')" \
  /cdrun/rdzv/fin/state
after=$(ectl lease list | grep -cE '^[0-9a-f]+$')
expect_eq "leases left by the finished job" "$((after - before))" 1
exit 0
