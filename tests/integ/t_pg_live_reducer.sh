#!/bin/bash
# libpg live recovery and the reducer (issue 30, Note [reducer after
# recovery]): workers follow libpg(3)'s EXAMPLE pattern (gradients added
# with +=, zeroed after the update, a loss all-reduce after
# pg_reducer_finish); a rank dies at an exact phase of the reducer
# (LIVE_DIE_AT): after its first gradient is marked (a bucket in
# flight), with every gradient marked before the finish, or after the
# finish (the survivors hold averaged gradients, not yet used).  Every
# worker must end bitwise equal to the fault-free run: no rank, the
# heal's source included, may keep the interrupted step's gradients.
# Shared memory and TCP.
# integ-timeout: 300
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"
STEPS=12

live_reference "$T/ref" 3 h h h
echo "fault-free: $REF" >&2

# The += pattern gives the same bits when nothing fails.
d=$T/accum
mkdir "$d"
live_store "$d"
for r in 0 1 2; do
  live_worker "$d" "r$r" "$r" 3 h 0 LIVE_ACCUM=1
done
live_expect "$d" "$REF" r0 r1 r2
kill "$STORE_PID"

# live_phase NAME DIE_RANK PHASE HOST_PREFIX [VAR=VALUE...]: rank
# DIE_RANK dies in step 5 at PHASE, its replacement joins, every worker
# ends with REF.
live_phase() {
  local name=$1 dr=$2 phase=$3 hp=$4 r h
  shift 4
  d=$T/$name
  mkdir "$d"
  live_store "$d"
  for r in 0 1 2; do
    h=$hp
    [ "$hp" = h ] || h=$hp$r
    live_worker "$d" "r$r" "$r" 3 "$h" 0 LIVE_DIE=5:"$dr" \
      LIVE_DIE_AT="$phase" "$@"
  done
  live_wait "$d" "r$dr" 137
  h=$hp
  [ "$hp" = h ] || h=$hp$dr
  live_worker "$d" "r${dr}b" "$dr" 3 "$h" 1 "$@"
  local names=()
  for r in 0 1 2; do
    if [ "$r" = "$dr" ]; then names+=("r${dr}b"); else names+=("r$r"); fi
  done
  live_expect "$d" "$REF" "${names[@]}"
  expect_grep 'recovered generation=1 ' "$d/r$(( (dr + 1) % 3 )).err"
  kill "$STORE_PID"
}

live_phase mark 1 mark h LIVE_ACCUM=1
live_phase marked 2 marked h LIVE_ACCUM=1
# The heal's source would be rank 0 after rank 1's death; here rank 0
# dies and rank 1 heals.
live_phase finished 0 finished h LIVE_ACCUM=1
live_phase finished_tcp 1 finished t LIVE_ACCUM=1
# The overwrite pattern (zero or write before every step) as well.
live_phase finished_write 1 finished h
exit 0
