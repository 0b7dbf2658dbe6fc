#!/bin/bash
# pg_live_lib.sh -- helpers for the live recovery scenarios t_pg_live*.sh
# (sourced after lib.sh): a live store served by pg_store_host, and
# pg_live_worker processes started with the live environment by hand, as
# cdrun --recovery=live would start them (cdrun's side is tested by
# t_live_agent*.sh).
HELPERS=$(dirname "$TW")
LIVE_WORKER=$HELPERS/pg_live_worker
export CDRUN_JOB_TOKEN=live-test-token-0123456789abcdef
STEPS=${STEPS:-24}
ELEMS=${ELEMS:-60000}

# live_store DIR: serves a store; sets STORE_PID and STORE_PORT.
live_store() {
  "$HELPERS/pg_store_host" >"$1/store.out" 2>"$1/store.err" &
  STORE_PID=$!
  STARTED+=("$STORE_PID")
  wait_grep '^port [0-9]+$' "$1/store.out" 20
  STORE_PORT=$(awk '{ print $2 }' "$1/store.out")
}

# live_worker DIR NAME RANK WORLD HOST RESTARTS [VAR=VALUE...]: starts a
# worker; its pid goes to W_<NAME>, its output to DIR/NAME.out and .err.
live_worker() {
  local d=$1 name=$2 r=$3 w=$4 h=$5 k=$6
  shift 6
  env CDRUN_RECOVERY=live CDRUN_LIVE_STORE="127.0.0.1:$STORE_PORT" \
    CDRUN_LIVE_OPT_IN="$d/optin.$name" CDRUN_WORKER_RESTARTS="$k" \
    RANK="$r" WORLD_SIZE="$w" LOCAL_RANK="${LOCAL_RANK_OF:-$r}" \
    LOCAL_WORLD_SIZE="$w" MASTER_ADDR=127.0.0.1 MASTER_PORT=1 \
    PG_TIMEOUT=${PG_TIMEOUT:-60} PG_HOST_ID="$h" "$@" \
    "$LIVE_WORKER" "$STEPS" "$ELEMS" >"$d/$name.out" 2>"$d/$name.err" &
  printf -v "W_$name" %s "$!"
  STARTED+=("$!")
}

# live_wait DIR NAME WANT_RC: waits for worker NAME to exit with WANT_RC.
live_wait() {
  local pid_var=W_$2
  wait_exit "${!pid_var}" 120
  if [ "$RC" != "$3" ]; then
    cat "$1/$2.err" >&2
    fail "worker $2 exited $RC, want $3"
  fi
}

# live_hash DIR NAME: the worker's final line's hash.
live_final() {
  expect_grep '^final ' "$1/$2.out"
  sed -n 's/^final //p' "$1/$2.out"
}

# live_reference DIR WORLD HOSTS...: a fault-free run of WORLD workers
# (host ids HOSTS, one per rank); sets REF to its common final line.
live_reference() {
  local d=$1 w=$2 r line
  shift 2
  mkdir -p "$d"
  live_store "$d"
  for ((r = 0; r < w; r++)); do
    live_worker "$d" "r$r" "$r" "$w" "$1" 0
    shift
  done
  REF=
  for ((r = 0; r < w; r++)); do
    live_wait "$d" "r$r" 0
    line=$(live_final "$d" "r$r" | sed 's/^rank=[0-9]* //')
    [ -z "$REF" ] && REF=$line
    expect_eq "fault-free rank $r" "$line" "$REF"
  done
  kill "$STORE_PID"
}

# live_expect DIR REF NAMES...: every named worker ended with REF (minus
# its rank) and exit status 0.
live_expect() {
  local d=$1 ref=$2 n line
  shift 2
  for n in "$@"; do
    live_wait "$d" "$n" 0
    line=$(live_final "$d" "$n" | sed 's/^rank=[0-9]* //')
    [ "$line" = "$ref" ] || {
      cat "$d/$n.err" >&2
      fail "$d: worker $n ended '$line', want '$ref'"
    }
  done
}

# round_file PATH ROUND WORLD OFFSET LOCAL: rewritten atomically, as
# cdrun's agent writes CDRUN_LIVE_ROUND_FILE.
round_file() {
  echo "round=$2 world=$3 rank_offset=$4 local_world=$5" >"$1.tmp"
  mv "$1.tmp" "$1"
}

# live_fake_nccl: the workers run libpg's NCCL backend on the fake GPU of
# tests/fakecuda/ (skips where libpg was built without NCCL headers).
live_fake_nccl() {
  FAKE=$(dirname "$(dirname "$TW")")/fake-nccl/tests
  [ -x "$FAKE/pg_live_worker" ] ||
    skip "no $FAKE/pg_live_worker (libpg built without NCCL headers)"
  LIVE_WORKER=$FAKE/pg_live_worker
  export PG_BACKEND=nccl PG_NCCL_BLOCKING_WAIT=1 FAKECUDA_DEVICES=4
  # The worker's state is malloc'd: the fake takes it for device memory.
  export FAKECUDA_HOST_IS_DEVICE=1
}

# live_two_nodes DIR WORLD NA HOST_A HOST_B [VAR=VALUE...]: serves a store
# and starts WORLD workers on two nodes with round files DIR/round.A
# (ranks 0..NA-1, host id HOST_A) and DIR/round.B (the rest, HOST_B).
# Each node's local ranks count from 0, so to NCCL (and the fake, which
# refuses two ranks of a communicator on one GPU of one host) the nodes
# are two machines: NCCL_HOSTID.
live_two_nodes() {
  local d=$1 w=$2 na=$3 ha=$4 hb=$5 r
  shift 5
  live_store "$d"
  round_file "$d/round.A" 0 "$w" 0 "$na"
  round_file "$d/round.B" 0 "$w" "$na" $((w - na))
  for ((r = 0; r < w; r++)); do
    if [ "$r" -lt "$na" ]; then
      LOCAL_RANK_OF=$r live_worker "$d" "r$r" "$r" "$w" "$ha" 0 \
        CDRUN_LIVE_ROUND_FILE="$d/round.A" NCCL_HOSTID=node-A "$@"
    else
      LOCAL_RANK_OF=$((r - na)) live_worker "$d" "r$r" "$r" "$w" "$hb" 0 \
        CDRUN_LIVE_ROUND_FILE="$d/round.B" NCCL_HOSTID=node-B "$@"
    fi
  done
}

# live_shrink DIR HOST_A HOST_B [VAR=VALUE...]: node A (ranks 0 1, host
# id HOST_A), node B (2 3, HOST_B); B's workers die in step 6, then A's
# round file says a world of 2, and A's two finish alone, equal, at
# world 2.  The store is stopped afterwards; DIR keeps the outputs.
live_shrink() {
  local d=$1 ha=$2 hb=$3 final0 final1
  shift 3
  mkdir "$d"
  live_two_nodes "$d" 4 2 "$ha" "$hb" LIVE_DIE=6:2,6:3 "$@"
  live_wait "$d" r2 137
  live_wait "$d" r3 137
  round_file "$d/round.A" 1 2 0 2
  live_wait "$d" r0 0
  live_wait "$d" r1 0
  final0=$(live_final "$d" r0 | sed 's/^rank=[0-9]* //')
  final1=$(live_final "$d" r1 | sed 's/^rank=[0-9]* //')
  expect_eq "shrink: rank 1's end" "$final1" "$final0"
  case $final0 in
    "world=2 step=$STEPS "*) ;;
    *) fail "shrink: ended '$final0', want world=2 step=$STEPS" ;;
  esac
  kill "$STORE_PID"
}
