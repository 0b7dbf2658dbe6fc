#!/bin/bash
# libpg: pg_group_start/end -- every rank sends 1 MiB to both neighbours
# before receiving, in one group; over shared memory and forced TCP, 2
# and 3 ranks (a pair and a cycle); TCP with its spin off and at its
# most (PG_TCP_SPIN_US), also yielding with both ranks on one CPU, and a
# bad value refused by name.
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest
for hid in same-host 'h$RANK'; do
  for n in 2 3; do
    PG_TIMEOUT=60 "$CDRUN" --standalone --nproc_per_node=$n --no_python \
      /bin/sh -c "PG_HOST_ID=$hid exec \"\$0\" exchange" "$PGTEST" \
      >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "exchange ($hid, $n) failed"; }
    expect_grep "pgtest exchange: rank 0 of $n .*, 0 failed" "$T/err"
  done
done
for spin in 0 10000; do
  PG_TCP_SPIN_US=$spin PG_TIMEOUT=60 "$CDRUN" --standalone --nproc_per_node=2 \
    --no_python /bin/sh -c 'PG_HOST_ID=h$RANK exec "$0" exchange' "$PGTEST" \
    >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "exchange (spin $spin) failed"; }
  expect_grep "pgtest exchange: rank 0 of 2 .*, 0 failed" "$T/err"
done
# Both ranks on one CPU: more ranks than CPUs, so the spin yields the CPU
# (Note [spin then sleep]); at its longest the peer must still get it.
if command -v taskset >/dev/null; then
  PG_TCP_SPIN_US=10000 PG_TIMEOUT=60 taskset -c "$(taskset -pc $$ |
      sed 's/.*: *//; s/[,-].*//')" "$CDRUN" --standalone --nproc_per_node=2 \
    --no_python /bin/sh -c 'PG_HOST_ID=h$RANK exec "$0" exchange' "$PGTEST" \
    >"$T/out" 2>"$T/err" || { cat "$T/err"; fail "exchange on one CPU failed"; }
  expect_grep "pgtest exchange: rank 0 of 2 .*, 0 failed" "$T/err"
fi
PG_TCP_SPIN_US=lots PG_TIMEOUT=60 "$CDRUN" --standalone --nproc_per_node=2 \
  --no_python /bin/sh -c 'PG_HOST_ID=h$RANK exec "$0" exchange' "$PGTEST" \
  >"$T/out" 2>"$T/err" && fail "PG_TCP_SPIN_US=lots was accepted"
expect_grep "PG_TCP_SPIN_US is 'lots', expected an integer 0..10000" "$T/err"
exit 0
