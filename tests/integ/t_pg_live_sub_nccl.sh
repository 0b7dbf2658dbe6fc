#!/bin/bash
# t_pg_live_sub.sh's running-operation cases on libpg's NCCL backend, on
# the fake GPU of tests/fakecuda/: rank 3 dies before its half's
# all-reduce, and rank 0 waits on rank 2 (recovering) in the parity
# all-reduce, the parity group's point-to-point or the world's.  The
# sub-groups are split from the world (ncclCommSplit) and learn of a
# death on this machine as the world does (Note [peer liveness]); a wait
# for PG_TIMEOUT shows as "did not complete within" in an error.
# integ-timeout: 300
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"
live_fake_nccl
LIVE_WORKER=$(dirname "$LIVE_WORKER")/pg_live_sub
STEPS=6
ELEMS=4000
export PG_TIMEOUT=15

for order in half,parity,pp2p,wp2p,world half,pp2p,parity,wp2p,world \
             half,wp2p,parity,pp2p,world; do
  phase=${order#half,}
  phase=${phase%%,*}
  export LIVE_ORDER=$order
  live_reference "$T/ref-$phase" 4 h h h h
  d=$T/$phase
  mkdir "$d"
  live_store "$d"
  for r in 0 1 2 3; do
    live_worker "$d" "r$r" "$r" 4 h 0 LIVE_DIE=3:3:half
  done
  live_wait "$d" r3 137
  live_worker "$d" r3b 3 4 h 1
  live_expect "$d" "$REF" r0 r1 r2 r3b
  for n in r0 r1 r2 r3b; do
    if grep -q 'did not complete within\|timed out' "$d/$n.err"; then
      cat "$d/$n.err" >&2
      fail "$d: worker $n waited for a timeout"
    fi
  done
  expect_grep "^lost phase=$phase step=3 err=ERR_PEER_LOST " "$d/r0.err"
  kill "$STORE_PID"
done
exit 0
