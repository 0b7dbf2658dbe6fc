#!/bin/bash
# libpg live recovery, the world changes size (issue 24): a node's
# workers die and the survivors' round file says a smaller world (a
# shrink: they go on alone, no process restarted); a round file says a
# larger world and a new node's worker joins the running group at a step
# boundary (a grow: pg_membership_poll, then pg_recover; the newcomer
# heals from a survivor).  Sub-groups of the old generation fail with
# PG_ESTALE_GROUP.  Every worker ends with the same state.  Started by
# hand with round files, as cdrun's agents would write them.
# integ-timeout: 300
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"

# Shrink: node A (ranks 0 1), node B (2 3); B's workers die in step 6.
d=$T/shrink
live_shrink "$d" A B LIVE_SUBGROUP=1
expect_grep '^recovered generation=1 rank=0 world=2 old_rank=0 old_world=4 joined=0 left=2 heal_source=0 .* new=-$' "$d/r0.err"
expect_grep '^stale sub-group: ESTALE_GROUP' "$d/r1.err"

# Grow: node A (ranks 0 1) holds at step 6 until the world is 3; node
# B's worker starts then, with a round file of the larger world.
d=$T/grow
mkdir "$d"
live_store "$d"
round_file "$d/round.A" 0 2 0 2
for r in 0 1; do
  live_worker "$d" "r$r" "$r" 2 "h$r" 0 CDRUN_LIVE_ROUND_FILE="$d/round.A" \
    LIVE_HOLD=6:3 LIVE_SUBGROUP=1
done
wait_grep '^holding at step 6' "$d/r0.err" 60
wait_grep '^holding at step 6' "$d/r1.err" 60
round_file "$d/round.B" 1 3 2 1
round_file "$d/round.A" 1 3 0 2
LOCAL_RANK_OF=0 live_worker "$d" r2 2 3 h2 0 \
  CDRUN_LIVE_ROUND_FILE="$d/round.B" LIVE_HOLD=6:3 LIVE_SUBGROUP=1
for n in r0 r1 r2; do
  live_wait "$d" "$n" 0
done
final0=$(live_final "$d" r0 | sed 's/^rank=[0-9]* //')
for n in r1 r2; do
  expect_eq "grow: $n's end" "$(live_final "$d" $n | sed 's/^rank=[0-9]* //')" \
    "$final0"
done
case $final0 in
  "world=3 step=$STEPS "*) ;;
  *) fail "grow: ended '$final0', want world=3 step=$STEPS" ;;
esac
expect_grep '^joined_running=1 live=1 new=2$' "$d/r2.out"
expect_grep '^recovered generation=1 rank=1 world=3 old_rank=1 old_world=2 joined=1 left=0 heal_source=0 .* new=2$' "$d/r1.err"
expect_grep '^stale sub-group: ESTALE_GROUP' "$d/r0.err"
kill "$STORE_PID"
exit 0
