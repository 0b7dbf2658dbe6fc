#!/bin/bash
# libpg live recovery when no member holds the state any more (Note
# [state lost]): in a world of two, rank 0 dies in step 5 and rank 1, its
# replacement's heal source, dies after the first of the heal's chunks
# (PG_TEST_LIVE_KILL; the state is two chunks).  The next generation
# (rank 0's half-healed replacement and rank 1's fresh one) has nothing
# to heal from: both fail with -ENODATA and a sentence, never run on with
# a half-received state or reducers whose layouts were never agreed.
# Their replacements form a generation of fresh processes, which starts
# over as the job did and ends equal to the fault-free run.  Shared
# memory.
# integ-timeout: 200
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"
STEPS=8
ELEMS=600000

live_reference "$T/ref" 2 h h
echo "fault-free: $REF" >&2

d=$T/lost
mkdir "$d"
live_store "$d"
live_worker "$d" r0 0 2 h 0 LIVE_DIE=5:0
live_worker "$d" r1 1 2 h 0 LIVE_DIE=5:0 PG_TEST_LIVE_KILL=heal:1:1
live_wait "$d" r0 137
live_worker "$d" r0b 0 2 h 1
live_wait "$d" r1 137
live_worker "$d" r1b 1 2 h 1
live_wait "$d" r0b 1
live_wait "$d" r1b 1
expect_grep 'pg_recover: ENODATA \(generation [0-9]+: the live state is lost' \
  "$d/r0b.err"
expect_grep 'pg_state_register: ENODATA \(generation [0-9]+: the live state is lost' \
  "$d/r1b.err"
live_worker "$d" r0c 0 2 h 2
live_worker "$d" r1c 1 2 h 2
live_expect "$d" "$REF" r0c r1c
expect_grep '^joined_running=0 ' "$d/r0c.out"
kill "$STORE_PID"
exit 0
