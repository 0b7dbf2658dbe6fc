#!/bin/bash
# lib.sh -- helpers for the integration scenarios (sourced).
# Every scenario runs the real bin/cdrun ($CDRUN) with the real test worker
# ($TESTWORKER), in a private temporary directory, and kills by pid every
# process it started, whatever happens.
set -u

: "${CDRUN:?CDRUN must point to bin/cdrun}"
: "${TESTWORKER:?TESTWORKER must point to the test worker}"
TW=$TESTWORKER
T=$(mktemp -d "${TMPDIR:-/tmp}/cdrun-test.XXXXXX")
STARTED=()

cleanup() {
  local p f
  for p in "${STARTED[@]+"${STARTED[@]}"}"; do
    kill -9 "$p" 2>/dev/null
  done
  # Workers and grandchildren recorded their pids: none may survive.
  for f in "$T"/*/pid.* "$T"/*/gpid.* "$T"/pid.* "$T"/gpid.*; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  rm -rf "$T"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

# Runs cdrun in the background; its pid is in $BG.  Output goes to
# $T/out and $T/err unless redirected by the caller.
bg_cdrun() {
  "$CDRUN" "$@" >"$T/out" 2>"$T/err" &
  BG=$!
  STARTED+=("$BG")
}

# wait_files GLOB COUNT SECONDS: waits until COUNT files match GLOB.
wait_files() {
  local glob=$1 count=$2 secs=$3 i n
  for ((i = 0; i < secs * 20; i++)); do
    n=$(compgen -G "$glob" | wc -l)
    [ "$n" -ge "$count" ] && return 0
    sleep 0.05
  done
  fail "timed out waiting for $count files matching $glob (have $n)"
}

# wait_exit PID SECONDS: waits for a background child, sets $RC.
wait_exit() {
  local pid=$1 secs=$2 i
  for ((i = 0; i < secs * 20; i++)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      RC=$?
      return 0
    fi
    sleep 0.05
  done
  fail "process $pid still running after ${secs}s"
}

# alive PID: true if the process exists and is not a zombie.
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "${st#Z}" = "$st" ]
}

# expect_eq WHAT GOT WANT
expect_eq() {
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}

# expect_grep PATTERN FILE: an extended regex must match a line of FILE.
expect_grep() {
  grep -Eq -- "$1" "$2" || {
    echo "--- $2:" >&2
    cat "$2" >&2
    fail "no line matching '$1' in $2"
  }
}

# envval FILE NAME: a variable from a testworker env file.
envval() {
  sed -n "s/^$2=//p" "$1"
}
