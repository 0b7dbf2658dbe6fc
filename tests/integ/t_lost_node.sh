#!/bin/bash
# Note [a lost node] (rdzvd/rdzv_rules.h): a fixed-size job (--nnodes=2,
# no restart left, no Slurm, no hostfile) whose other node leaves ends on
# the survivor at once, naming the node and how it left, with exit status
# 75, on rdzvd and on the embedded back end.  Before, the survivor
# restarted its workers and waited for the node until join_timeout (600 s
# here: the waits below would fail first).
. "$(dirname "$0")/lib.sh"

start_rdzvd
EP=127.0.0.1:$RDZVD_PORT

# pair DIR ID ARGS...: two agents a and b of job ID, 1 worker each,
# sleeping; returns once both workers run.
pair() {
  local dir=$1 id=$2
  shift 2
  mkdir "$T/$dir"
  for k in a b; do
    agent "$dir$k" --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
      --rdzv_backend=c10d --rdzv_id="$id" "$@" "$TW" sleep "$T/$dir" 600
  done
  wait_files "$T/$dir/pid.*" 2 60
}

# survivor_ends NAME HOW: NAME's cdrun exits 75 and says how its peer left.
survivor_ends() {
  local pid
  pid=AGENT_$1
  wait_exit "${!pid}" 60
  [ "$RC" -eq 75 ] || { cat "$T/$1.err"; fail "$1 exited $RC, want 75"; }
  expect_grep "node [^ ]+ .*\($2\): the job cannot reach its size \(1 of 2 nodes\) and no restart is left \(0 of 0 used\): ending the job \(exit status 75\)" "$T/$1.err"
  grep -q "restarting the worker group" "$T/$1.err" &&
    fail "$1 restarted its workers for a job that cannot go on"
  return 0
}

# ---- rdzvd: b's cdrun stopped by SIGTERM says goodbye ----------------------
pair g goodbye --rdzv_endpoint="$EP"
kill -TERM "$AGENT_gb"
wait_exit "$AGENT_gb" 60
survivor_ends ga "it said goodbye"

# ---- rdzvd: b's cdrun killed ------------------------------------------------
pair d died --rdzv_endpoint="$EP"
kill -9 "$AGENT_db"
survivor_ends da "its agent died"

# ---- rdzvd: b's cdrun stopped, its link silent for the keepalive window -----
pair s silent --rdzv_endpoint="$EP" \
  --rdzv_conf=keepalive_interval=0.2,keepalive_misses=3
kill -STOP "$AGENT_sb"
survivor_ends sa "its link went silent"
kill -9 "$AGENT_sb"

# ---- embedded: the hosting node survives the other -----------------------
port=$(free_port)
mkdir "$T/e"
agent eh --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
  --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=emb \
  "$TW" sleep "$T/e" 600
wait_grep 'hosting the rendezvous' "$T/eh.err" 30
agent eo --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
  --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=emb \
  --rdzv_conf=is_host=0 "$TW" sleep "$T/e" 600
wait_files "$T/e/pid.*" 2 60
kill -9 "$AGENT_eo"
survivor_ends eh "its agent died"

for f in "$T"/*/pid.*; do
  alive "$(cat "$f")" && fail "worker $(cat "$f") outlived the job"
done
exit 0
