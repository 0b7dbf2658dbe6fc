#!/bin/bash
# examples/train_mlp --recovery live: two workers of four SIGKILLed at the
# start of the same step are both replaced alone, and the run ends bitwise
# equal to a fault-free one, with neither survivor restarted nor a
# checkpoint reloaded.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_train_lib.sh"

ref

# Two workers die in one step.
train two --recovery=live --max_restarts=1 -- --recovery live \
  --die-at-step 45 --die-rank 1,2
same_as_ref two
for r in 0 3; do
  expect_eq "two: rank $r started" "$(starts two $r)" "0/0 "
done
for r in 1 2; do
  expect_eq "two: rank $r started" "$(starts two $r)" "0/0 45/1 "
done
joined=$(sed -En 's/^live_recovery .* joined=([0-9]+) .*/\1/p' "$T/two.log" |
         awk '{ s += $1 } END { print s }')
expect_eq "two: ranks joined over the recoveries" "$joined" 2
! grep -Eq '^resumed from step' "$T/two.log" || fail "two: a checkpoint was reloaded"

exit 0
