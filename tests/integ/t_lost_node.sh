#!/bin/bash
# Note [a lost node] (rdzvd/rdzv_rules.h): a fixed-size job (--nnodes=2,
# no restart left, no Slurm, no hostfile) whose other node leaves ends on
# the survivor at once, naming the node and how it left, with exit status
# 75, on rdzvd, on the embedded back end (the host's own loss too: Note [a
# lost host]) and on the static back end (Note [static watch],
# launcher/static_barrier.h).  Before, the survivor
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

# embedded_pair DIR ID [CONF]: agents DIRh (hosting the rendezvous on
# $port) and DIRo of job ID (--rdzv_conf CONF), 1 sleeping worker each;
# returns once both workers run.
embedded_pair() {
  local dir=$1 id=$2 conf=${3:-is_host=1}
  port=$(free_port)
  mkdir "$T/$dir"
  agent "${dir}h" --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="$id" \
    --rdzv_conf="$conf" "$TW" sleep "$T/$dir" 600
  wait_grep 'hosting the rendezvous' "$T/${dir}h.err" 30
  agent "${dir}o" --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id="$id" \
    --rdzv_conf="$conf,is_host=0" "$TW" sleep "$T/$dir" 600
  wait_files "$T/$dir/pid.*" 2 60
}

# ---- embedded: the hosting node survives the other -----------------------
embedded_pair e emb
kill -9 "$AGENT_eo"
survivor_ends eh "its agent died"

# ---- embedded: the hosting node is killed --------------------------------
# Note [a lost host] (rdzvd/rdzv_rules.h): the rendezvous dies with it; the
# other node ends the job once the host is not back within one keepalive
# window and the host's grace (7 s here), not after reconnect_timeout
# (60 s: the wait below fails first, as it did before).
embedded_pair x embx
kill -9 "$AGENT_xh"
wait_exit "$AGENT_xo" 40
[ "$RC" -eq 75 ] || { cat "$T/xo.err"; fail "xo exited $RC, want 75"; }
expect_grep "the rendezvous host 127.0.0.1:$port \(embedded in the agent of node 0\) did not come back within 7 s \(one keepalive window and 2 s\): .*: node 0 left \(its agent died\): the job cannot reach its size \(1 of 2 nodes\) and no restart is left \(0 of 0 used\): ending the job \(exit status 75\)" "$T/xo.err"

# The hosting node is killed while the other node's workers have finished
# and it waits at the exit barrier (its worker reaped: the agent's only
# child left is its guardian).
port=$(free_port)
mkdir "$T/z"
agent zh --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
  --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=embz \
  "$TW" sleep "$T/z" 600
wait_grep 'hosting the rendezvous' "$T/zh.err" 30
agent zo --nnodes=2 --nproc_per_node=1 --max_restarts=0 \
  --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=embz \
  --rdzv_conf=is_host=0 "$TW" env "$T/z"
wait_files "$T/z/pid.*" 1 60
wait_files "$T/z/env.*" 1 60
for ((i = 0; i < 1200; i++)); do
  [ "$(cat /proc/"$AGENT_zo"/task/*/children | wc -w)" -le 1 ] && break
  sleep 0.05
done
kill -9 "$AGENT_zh"
wait_exit "$AGENT_zo" 40
[ "$RC" -eq 75 ] || { cat "$T/zo.err"; fail "zo exited $RC, want 75"; }
expect_grep "node 0 left \(its agent died\): the job cannot reach its size \(1 of 2 nodes\)" "$T/zo.err"

# The hosting node's agent stopped: its link went silent (a short window,
# as for rdzvd above); 2 s after it the other node ends the job.
embedded_pair y emby keepalive_interval=0.2,keepalive_misses=3
kill -STOP "$AGENT_yh"
wait_exit "$AGENT_yo" 40
[ "$RC" -eq 75 ] || { cat "$T/yo.err"; fail "yo exited $RC, want 75"; }
expect_grep "embedded in the agent of node 0\) did not come back within 2 s \(2 s after the keepalive window\): .*: node 0 left \(its link went silent\): the job cannot reach its size" "$T/yo.err"
kill -9 "$AGENT_yh"

# ---- static: nodes met once; node 1 stopped, then node 0 killed ----------
# static_pair DIR [RESTARTS]: nodes DIR0 and DIR1 (--max_restarts=RESTARTS,
# 1 by default: a static node gone for good ends the job anyway).
static_pair() {
  local dir=$1 restarts=${2:-1} port
  port=$(free_port)
  mkdir "$T/$dir"
  for k in 0 1; do
    agent "$dir$k" --nnodes=2 --node_rank=$k --nproc_per_node=1 \
      --max_restarts="$restarts" --master_addr=127.0.0.1 \
      --master_port="$port" "$TW" sleep "$T/$dir" 600
  done
  wait_files "$T/$dir/pid.*" 2 60
}

FIXED="the job's nodes are fixed: none can take its place"

# static_ends NAME HOW [WHY]: as survivor_ends, for the static back end
# (WHY: the rule's reason, $FIXED by default).
static_ends() {
  local pid
  pid=AGENT_$1
  wait_exit "${!pid}" 40
  [ "$RC" -eq 75 ] || { cat "$T/$1.err"; fail "$1 exited $RC, want 75"; }
  expect_grep "static rendezvous: node rank [01] \([^)]*\) left \($2\): ${3:-$FIXED}: ending the job \(exit status 75\)" "$T/$1.err"
}

static_pair t
kill -TERM "$AGENT_t1"
wait_exit "$AGENT_t1" 60
static_ends t0 "it said goodbye"

static_pair k
kill -9 "$AGENT_k0"
static_ends k1 "its agent died"

# A silent link (Note [static keepalive], launcher/static_barrier.h): a
# stopped agent closes nothing; with no restart left the other node ends
# the job after the keepalive window (5 s).  Before, it waited for ever
# (the waits above fail first).  Node 1 stopped, then node 0.
SHORT="the job cannot reach its size \(1 of 2 nodes\) and no restart is left \(0 of 0 used\)"
static_pair u 0
kill -STOP "$AGENT_u1"
static_ends u0 "its link went silent" "$SHORT"
kill -9 "$AGENT_u1"
static_pair v 0
kill -STOP "$AGENT_v0"
static_ends v1 "its link went silent" "$SHORT"
expect_grep "node rank 0 \(127\.0\.0\.1\)" "$T/v1.err"
kill -9 "$AGENT_v0"
# With a restart left a silent link may be back: node 0 says so and goes
# on, and ends the job once the stopped node's agent dies.
static_pair w 1
kill -STOP "$AGENT_w1"
wait_grep "static rendezvous: node rank 1 \([^)]*\): its link went silent for its keepalive window; the job goes on" "$T/w0.err" 40
alive "$AGENT_w0" || fail "w0 ended on a silent link with a restart left"
kill -9 "$AGENT_w1"
static_ends w0 "its agent died"

# A node whose workers succeed leaves quietly: the other runs on.
port=$(free_port)
mkdir "$T/q"
agent q0 --nnodes=2 --node_rank=0 --nproc_per_node=1 \
  --master_addr=127.0.0.1 --master_port="$port" "$TW" elastic "$T/q" 3
agent q1 --nnodes=2 --node_rank=1 --nproc_per_node=1 \
  --master_addr=127.0.0.1 --master_port="$port" "$TW" env "$T/q"
wait_exit "$AGENT_q1" 60
expect_eq "q1 (succeeded first)" "$RC" 0
wait_exit "$AGENT_q0" 60
expect_eq "q0 (succeeded after q1 left)" "$RC" 0

for f in "$T"/*/pid.*; do
  alive "$(cat "$f")" && fail "worker $(cat "$f") outlived the job"
done
exit 0
