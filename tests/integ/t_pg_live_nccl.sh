#!/bin/bash
# libpg live recovery on the NCCL backend, on the fake GPU of
# tests/fakecuda/ (host memory as device memory): a worker replaced alone
# gets a new communicator for the new generation and the state healed
# through NCCL broadcasts, and every worker ends bitwise equal to a
# fault-free run on the same backend.  The survivors' operation timeout
# is short: that is how a death is found where the backend has no faster
# detector.  (The shrink of a lost node is check_pg_nccl's.)
# integ-timeout: 300
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"

live_fake_nccl
STEPS=12
ELEMS=20000

PG_TIMEOUT=60 live_reference "$T/ref" 3 h h h
echo "fault-free: $REF" >&2

d=$T/kill
mkdir "$d"
live_store "$d"
for r in 0 1 2; do
  PG_TIMEOUT=3 live_worker "$d" "r$r" "$r" 3 h 0 LIVE_DIE=5:1
done
live_wait "$d" r1 137
PG_TIMEOUT=60 live_worker "$d" r1b 1 3 h 1
live_expect "$d" "$REF" r0 r2 r1b
expect_grep '^joined_running=1' "$d/r1b.out"
kill "$STORE_PID"
exit 0
