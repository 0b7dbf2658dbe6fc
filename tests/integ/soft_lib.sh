#!/bin/bash
# soft_lib.sh -- helpers for the soft-state scenarios (t_soft_*.sh):
# restarting rdzvd on the port its agents know, waiting for log lines,
# three agents with gated long-running workers.  Sourced after lib.sh.

# wait_grep PATTERN FILE SECONDS: waits until an extended regex matches a
# line of FILE.
wait_grep() {
  local pat=$1 file=$2 secs=$3 i
  for ((i = 0; i < secs * 20; i++)); do
    grep -Eq -- "$pat" "$file" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "--- $file:" >&2
  cat "$file" >&2 2>/dev/null
  fail "timed out waiting for '$pat' in $file"
}

# rdzvd_on PORT LOG [ARGS...]: starts rdzvd on 127.0.0.1:PORT (logging to
# LOG) and waits until it listens; sets RDZVD_PID.
rdzvd_on() {
  local port=$1 log=$2
  shift 2
  : >"$log"
  "$RDZVD" --host 127.0.0.1 --port "$port" "$@" 2>>"$log" &
  RDZVD_PID=$!
  STARTED+=("$RDZVD_PID")
  wait_grep "^rdzvd: listening on .*:$port " "$log" 30
}

# kill_rdzvd SIG: signals rdzvd and waits until it is gone.
kill_rdzvd() {
  kill "-$1" "$RDZVD_PID"
  wait_exit "$RDZVD_PID" 30
}

# three_agents ID DIR [ARGS...]: agents a, b, c of job ID, one gated
# worker each (testworker gate DIR), through $ep; --nnodes=$NNODES (3).
three_agents() {
  local id=$1 dir=$2 n
  shift 2
  mkdir -p "$dir"
  for n in a b c; do
    agent "$n" --nnodes="${NNODES:-3}" --nproc_per_node=1 --rdzv_backend=c10d \
      --rdzv_endpoint="$ep" --rdzv_id="$id" "$@" "$TW" gate "$dir"
  done
}

# pid_of DIR RANK RESTART WORLD: the pid a gated worker recorded.
pid_of() {
  cat "$1/pid.$2.$3.$4"
}

# expect_exit NAME SECS WANT: agent NAME exits WANT within SECS.
expect_exit() {
  local v=AGENT_$1
  wait_exit "${!v}" "$2"
  [ "$RC" -eq "$3" ] || { cat "$T/$1.err" >&2; fail "agent $1 exited $RC, want $3"; }
}
