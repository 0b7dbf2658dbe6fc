#!/bin/bash
# Live recovery (issue 24) on libpg's NCCL backend, on the fake GPU of
# tests/fakecuda/, end to end through pg_recover: pg_live_worker (a
# reducer over a registered state) with PG_BACKEND=nccl.
#  - a worker SIGKILLed in a step is replaced alone: the survivors see the
#    death through the watchdog (PG_ERR_PEER_LOST), the generation with the
#    replacement gets a new communicator (a fresh unique id), and every
#    worker ends bitwise equal to a fault-free run;
#  - a node's two workers die and the round file says a world of 2: the
#    survivors shrink their communicator (ncclCommShrink with
#    NCCL_SHRINK_ABORT, seen in the fake's trace) and finish alone;
#  - a shrink that fails on one survivor only (FAKENCCL_SHRINK_FAIL_RANK)
#    is followed by a new communicator on every member, not a second
#    shrink beside a create (Note [shrink] in libpg/live/recover.c).
# Workers are started by hand as cdrun --recovery=live would start them
# (pg_live_lib.sh).
# integ-timeout: 300
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"

live_fake_nccl
STEPS=16
ELEMS=20000

live_reference "$T/ref" 4 h h h h
echo "fault-free: $REF" >&2

# A replacement: rank 2 dies in step 5 with a bucket in flight.
d=$T/replace
mkdir "$d"
live_store "$d"
for r in 0 1 2 3; do
  live_worker "$d" "r$r" "$r" 4 h 0 LIVE_DIE=5:2 FAKENCCL_TRACE="$d/trace"
done
live_wait "$d" r2 137
live_worker "$d" r2b 2 4 h 1 FAKENCCL_TRACE="$d/trace"
live_expect "$d" "$REF" r0 r1 r3 r2b
expect_grep '^joined_running=1' "$d/r2b.out"
expect_grep '^recovered generation=[0-9]+ rank=0 world=4 .*joined=1 left=0' "$d/r0.err"
[ ! -e "$d/trace" ] || ! grep -q '^ncclCommShrink' "$d/trace" ||
  fail "a replacement must get a new communicator, not a shrink"
kill "$STORE_PID"

# A shrink: node A (ranks 0 1), node B (2 3) on one machine.
d=$T/shrink
live_shrink "$d" h h FAKENCCL_TRACE="$d/trace"
expect_grep '^recovered generation=1 rank=0 world=2 old_rank=0 old_world=4 joined=0 left=2' "$d/r0.err"
expect_eq "ncclCommShrink calls" \
  "$(grep -c '^ncclCommShrink rank=[01] n=4 excluded=0xc flags=1$' "$d/trace")" 2

# A failed shrink: node A (ranks 0 1 2), node B (3); B's worker dies in
# step 6 and A's round file says a world of 3.  Rank 1's shrink fails
# after the others' succeeded: its next generation, and theirs, make a
# new communicator, and the three finish together.
d=$T/shrinkfail
mkdir "$d"
live_two_nodes "$d" 4 3 h h LIVE_DIE=6:3 FAKENCCL_TRACE="$d/trace" \
  FAKENCCL_SHRINK_FAIL_RANK=1
live_wait "$d" r3 137
round_file "$d/round.A" 1 3 0 3
for r in 0 1 2; do
  live_wait "$d" "r$r" 0
done
final0=$(live_final "$d" r0 | sed 's/^rank=[0-9]* //')
for r in 1 2; do
  expect_eq "shrinkfail: rank $r's end" \
    "$(live_final "$d" "r$r" | sed 's/^rank=[0-9]* //')" "$final0"
done
case $final0 in
  "world=3 step=$STEPS "*) ;;
  *) fail "shrinkfail: ended '$final0', want world=3 step=$STEPS" ;;
esac
expect_grep 'the shrink failed' "$d/r1.err"
expect_grep '^recovered generation=[2-9] rank=1 world=3 ' "$d/r1.err"
expect_eq "ncclCommShrink calls" \
  "$(grep -c '^ncclCommShrink ' "$d/trace")" 3
kill "$STORE_PID"
exit 0
