#!/bin/bash
# libpg live recovery with sub-groups and point-to-point (issue 30,
# defect 5): a member's death reaches every survivor of every group it
# was in as PG_ERR_PEER_LOST, never a timeout.  pg_live_sub's world of
# 4 has halves {0,1} {2,3} (pg_new_group) and parities {0,2} {1,3}
# (pg_split).  Rank 3 dies before its half's all-reduce: rank 2 sees it
# and enters pg_recover, while rank 0 waits on rank 2 in the parity
# all-reduce, in the parity group's point-to-point, or in the world's
# point-to-point; rank 0 must be told (it waited PG_TIMEOUT before).
# The same in the first step, before the hierarchical comm's lazy
# connections across hosts exist.
# Then a death while the sub-groups are made again after pg_recover.
# Over shared memory, TCP and hierarchical (hosts A: 0 1, B: 2 3).
# PG_TIMEOUT is lowered: a wait for it shows as "timed out" in an
# error's sentence, or as pg_recover's -ETIMEDOUT (the worker exits 1);
# the scenario checks the errors, never the time.
# integ-timeout: 600
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/pg_live_lib.sh"
LIVE_WORKER=$HELPERS/pg_live_sub
STEPS=6
ELEMS=40000
export PG_TIMEOUT=15

# hosts_of BACKEND: the four host ids.
hosts_of() {
  case $1 in
    shm) echo h h h h ;;
    tcp) echo h0 h1 h2 h3 ;;
    hier) echo A A B B ;;
  esac
}

# no_timeout DIR NAMES...: no worker's error says it waited out a timeout.
no_timeout() {
  local d=$1 n
  shift
  for n in "$@"; do
    if grep -q 'timed out' "$d/$n.err"; then
      cat "$d/$n.err" >&2
      fail "$d: worker $n waited for a timeout"
    fi
  done
}

# start4 DIR BACKEND VAR=VALUE...: the four workers r0..r3.
start4() {
  local d=$1 be=$2 r
  local -a h
  shift 2
  read -ra h <<<"$(hosts_of "$be")"
  mkdir "$d"
  live_store "$d"
  for r in 0 1 2 3; do
    live_worker "$d" "r$r" "$r" 4 "${h[$r]}" 0 "$@"
  done
}

# host_of BACKEND RANK
host_of() {
  local -a h
  read -ra h <<<"$(hosts_of "$1")"
  echo "${h[$2]}"
}

for be in shm tcp hier; do
  # shellcheck disable=SC2046
  live_reference "$T/ref-$be" 4 $(hosts_of "$be")
  ref=$REF
  echo "$be fault-free: $ref" >&2

  # Rank 0 waits on rank 2 (recovering) in each kind of operation.
  for order in half,parity,pp2p,wp2p,world half,pp2p,parity,wp2p,world \
               half,wp2p,parity,pp2p,world; do
    phase=${order#half,}
    phase=${phase%%,*}
    d=$T/$be-$phase
    start4 "$d" "$be" LIVE_DIE=3:3:half LIVE_ORDER=$order
    live_wait "$d" r3 137
    live_worker "$d" r3b 3 4 "$(host_of "$be" 3)" 1 LIVE_ORDER=$order
    live_expect "$d" "$ref" r0 r1 r2 r3b
    no_timeout "$d" r0 r1 r2 r3b
    expect_grep "^lost phase=$phase step=3 err=ERR_PEER_LOST " \
      "$d/r0.err"
    expect_grep '^lost phase=half step=3 err=ERR_PEER_LOST ' "$d/r2.err"
    kill "$STORE_PID"
  done

  # In the first step, before any world point-to-point: across hosts
  # (hier) rank 0 waits for a connection that rank 2, recovering, never
  # makes, and rank 1's connection to the dead rank 3 is refused.
  d=$T/$be-first
  o=half,wp2p,parity,pp2p,world
  start4 "$d" "$be" LIVE_DIE=0:3:half LIVE_ORDER=$o
  live_wait "$d" r3 137
  live_worker "$d" r3b 3 4 "$(host_of "$be" 3)" 1 LIVE_ORDER=$o
  live_expect "$d" "$ref" r0 r1 r2 r3b
  no_timeout "$d" r0 r1 r2 r3b
  expect_grep '^lost phase=wp2p step=0 err=ERR_PEER_LOST ' "$d/r0.err"
  expect_grep '^lost phase=wp2p step=0 err=ERR_PEER_LOST ' "$d/r1.err"
  kill "$STORE_PID"

  # Rank 0 recovers with a parity all-reduce of its own in flight, on
  # rank 2, which waits on rank 0 in the world (LIVE_ORDER's cross):
  # pg_recover closes the world first, so rank 2 is told and closes the
  # parity group in turn.
  o=half,cross,pp2p,world
  export LIVE_ORDER=$o
  # shellcheck disable=SC2046
  live_reference "$T/ref-$be-cross" 4 $(hosts_of "$be")
  unset LIVE_ORDER
  d=$T/$be-cross
  start4 "$d" "$be" LIVE_DIE=3:3:cross LIVE_ORDER=$o
  live_wait "$d" r3 137
  live_worker "$d" r3b 3 4 "$(host_of "$be" 3)" 1 LIVE_ORDER=$o
  live_expect "$d" "$REF" r0 r1 r2 r3b
  no_timeout "$d" r0 r1 r2 r3b
  expect_grep '^lost phase=cross step=3 err=ERR_PEER_LOST ' "$d/r0.err"
  expect_grep '^lost phase=cross step=3 err=ERR_PEER_LOST ' "$d/r2.err"
  kill "$STORE_PID"

  # A death while the sub-groups are made again: after rank 3's
  # replacement joins (generation 1), rank 1 dies before its first
  # pg_new_group; rank 0 waits for it there, ranks 2 and 3 in pg_split.
  d=$T/$be-create
  start4 "$d" "$be" LIVE_DIE=3:3:half LIVE_DIE_CREATE=1:1:0
  live_wait "$d" r3 137
  live_worker "$d" r3b 3 4 "$(host_of "$be" 3)" 1
  live_wait "$d" r1 137
  live_worker "$d" r1b 1 4 "$(host_of "$be" 1)" 1
  live_expect "$d" "$ref" r0 r2 r1b r3b
  no_timeout "$d" r0 r2 r1b r3b
  for n in r0 r2; do
    expect_grep '^lost phase=create step=3 err=ERR_PEER_LOST ' \
      "$d/$n.err"
  done
  # The replacement makes its sub-groups after its heal, at start.
  expect_grep '^lost phase=start step=3 err=ERR_PEER_LOST ' "$d/r3b.err"
  kill "$STORE_PID"
done
exit 0
