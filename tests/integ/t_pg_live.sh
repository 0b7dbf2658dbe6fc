#!/bin/bash
# libpg live recovery, a worker replaced alone (issue 24): workers run
# steps of a reducer over a registered state; a SIGKILLed worker's
# replacement (same rank, CDRUN_WORKER_RESTARTS=1) joins the running
# group, heals from a survivor, and every worker ends with state bitwise
# equal to a fault-free run.  Shared memory (one host id), TCP (a host id
# per rank) and hierarchical (two hosts of two); two deaths within one
# step; a replacement killed during formation; the healing rank killed
# during the heal itself (PG_TEST_LIVE_KILL); a survivor killed
# while it recovers; one killed after it checked in to a generation,
# before the setup; three deaths one after another.  Started by hand:
# cdrun's side is t_live_agent*.sh's.
# integ-timeout: 400
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"

live_reference "$T/ref" 4 h h h h
echo "fault-free: $REF" >&2

# shm: rank 1 dies in step 7 with a bucket in flight; its first
# replacement is killed as soon as it starts (before, during or after the
# generation forms: every case must end the same), the second stays.
d=$T/shm
mkdir "$d"
live_store "$d"
for r in 0 1 2 3; do
  live_worker "$d" "r$r" "$r" 4 h 0 LIVE_DIE=7:1
done
live_wait "$d" r1 137
live_worker "$d" r1b 1 4 h 1
kill -9 "$W_r1b"
live_wait "$d" r1b 137
live_worker "$d" r1c 1 4 h 2
live_expect "$d" "$REF" r0 r2 r3 r1c
expect_grep '^joined_running=1 live=1 new=1$' "$d/r1c.out"
expect_grep '^joined_running=0 live=1 new=-$' "$d/r0.out"
expect_grep '^recovered generation=[0-9]+ rank=0 world=4 .*joined=1 left=0 heal_source=0 .* new=1$' "$d/r0.err"
kill "$STORE_PID"

# TCP: ranks 1 and 2 die in the same step; two replacements.
d=$T/tcp
mkdir "$d"
live_store "$d"
for r in 0 1 2 3; do
  live_worker "$d" "r$r" "$r" 4 "h$r" 0 LIVE_DIE=5:1,5:2
done
live_wait "$d" r1 137
live_wait "$d" r2 137
live_worker "$d" r1b 1 4 h1 1
live_worker "$d" r2b 2 4 h2 1
live_expect "$d" "$REF" r0 r3 r1b r2b
kill "$STORE_PID"

# Hierarchical (hosts A: 0 1, B: 2 3): rank 3 dies; in the generation
# that heals its replacement, rank 0 (the healing rank) dies after its
# first chunk; rank 1 heals everyone in the next generation.
d=$T/hier
mkdir "$d"
live_store "$d"
for r in 0 1 2 3; do
  h=A
  [ "$r" -ge 2 ] && h=B
  live_worker "$d" "r$r" "$r" 4 "$h" 0 LIVE_DIE=9:3 PG_TEST_LIVE_KILL=heal:1:0
done
live_wait "$d" r3 137
live_worker "$d" r3b 3 4 B 1
live_wait "$d" r0 137
live_worker "$d" r0b 0 4 A 1
live_expect "$d" "$REF" r1 r2 r3b r0b
expect_grep 'heal_source=1' "$d/r2.err"
kill "$STORE_PID"

# A survivor killed while it recovers: rank 2 dies in step 5 and the
# scenario kills rank 3 as soon as it sees that (rank 3 is then forming
# the next generation, setting it up or still in the step: every case
# must end the same), over shared memory.
d=$T/forming
mkdir "$d"
live_store "$d"
for r in 0 1 2 3; do
  live_worker "$d" "r$r" "$r" 4 h 0 LIVE_DIE=5:2
done
live_wait "$d" r2 137
kill -9 "$W_r3"
live_wait "$d" r3 137
live_worker "$d" r2b 2 4 h 1
live_worker "$d" r3b 3 4 h 1
live_expect "$d" "$REF" r0 r1 r2b r3b
kill "$STORE_PID"

# A member dies after the generation formed and it checked in, before
# the communicator is set up (PG_TEST_LIVE_KILL=setup): the others must
# not wait for its keys (the timeout is long here: waiting would hang the
# scenario); they and rank 1's replacement go on to the next generation
# with rank 2's replacement.  TCP.
d=$T/setup
mkdir "$d"
live_store "$d"
for r in 0 1 2 3; do
  PG_TIMEOUT=600 live_worker "$d" "r$r" "$r" 4 "h$r" 0 LIVE_DIE=6:1 \
    PG_TEST_LIVE_KILL=setup:1:2
done
live_wait "$d" r1 137
PG_TIMEOUT=600 live_worker "$d" r1b 1 4 h1 1
live_wait "$d" r2 137
PG_TIMEOUT=600 live_worker "$d" r2b 2 4 h2 1
live_expect "$d" "$REF" r0 r3 r1b r2b
expect_grep 'died while the group was set up' "$d/r0.err"
kill "$STORE_PID"

# One after another: ranks 1, 2 and 3 die in steps 4, 8 and 12 (three
# generations, each healed from rank 0), over TCP.
d=$T/serial
mkdir "$d"
live_store "$d"
for r in 0 1 2 3; do
  live_worker "$d" "r$r" "$r" 4 "h$r" 0 LIVE_DIE=4:1,8:2,12:3
done
for r in 1 2 3; do
  live_wait "$d" "r$r" 137
  live_worker "$d" "r${r}b" "$r" 4 "h$r" 1
done
live_expect "$d" "$REF" r0 r1b r2b r3b
expect_grep '^recovered generation=3 rank=0 ' "$d/r0.err"
kill "$STORE_PID"
exit 0
