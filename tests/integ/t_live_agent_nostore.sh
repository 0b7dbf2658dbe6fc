#!/bin/bash
# cdrun --recovery=live on rdzvd when node rank 0 has no libpg.so beside
# its cdrun: rdzvd serves the live store (Note [live store in rdzvd]), so
# the job runs live all the same.  With an rdzvd that cannot serve it
# either (no libpg.so beside rdzvd: it says so, and its rounds carry no
# live store), node 0 must serve it and cannot: the other nodes' workers
# could not reach it, so node 0 ends the job with a final failure that
# names the reason, and every node ends with it, its workers stopped (Note
# [no live store]); so does an elastic job's node 0 that ran alone in
# restart mode for it when a node joins.  (A job of one node falls back to
# restart mode: t_live_agent.sh.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_agent_lib.sh"

# all_end DIR...: every agent started so far ended with a nonzero status,
# and no worker of theirs (pids in DIR/pid.*) outlived them.
all_end() {
  local d f
  for d in "$@"; do
    wait_exit "$(eval echo "\$AGENT_$d")" 60
    [ "$RC" -ne 0 ] || fail "node $d exited 0 without the live store"
  done
  for d in "$@"; do
    for f in "$T/$d"/pid.*; do
      [ -e "$f" ] || continue
      alive "$(cat "$f")" && fail "$d's worker $(cat "$f") outlived cdrun"
    done
  done
}

conf=last_call_timeout=0.5,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5
mkdir -p "$T/nolib/bin" "$T/a" "$T/b" "$T/r0" "$T/r1"
cp "$CDRUN" "$T/nolib/bin/cdrun"
cp "$RDZVD" "$T/nolib/bin/rdzvd"

# ---- rdzvd serves the store: node 0 needs no libpg.so ----
start_rdzvd
ep=127.0.0.1:$RDZVD_PORT
args=(--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=served
      --rdzv_conf="$conf" --recovery=live --max_restarts=1 --no_python
      --nproc_per_node=1)
CDRUN=$T/nolib/bin/cdrun agent r0 "${args[@]}" "$LW" "$T/r0"
wait_grep "job served: .* joined round 0" "$T/rdzvd.log" 30   # r0 ranks first
agent r1 "${args[@]}" "$LW" "$T/r1"
wait_files "$T/r0/round.*" 1 30
wait_files "$T/r1/round.*" 1 30
sport=$(sed -n 's/.*job served: live store on port \([0-9]*\)$/\1/p' "$T/rdzvd.log")
[ -n "$sport" ] || fail "rdzvd served no live store"
expect_grep "^CDRUN_LIVE_STORE=127.0.0.1:$sport\$" "$T"/r0/env.0.*
expect_grep "^CDRUN_LIVE_STORE=127.0.0.1:$sport\$" "$T"/r1/env.1.*
touch "$T/r0/stop" "$T/r1/stop"
wait_exit "$AGENT_r0" 30
expect_eq "r0's exit" "$RC" 0
wait_exit "$AGENT_r1" 30
expect_eq "r1's exit" "$RC" 0
kill "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30

# ---- neither rdzvd nor node 0 can serve it ----
RDZVD=$T/nolib/bin/rdzvd start_rdzvd
ep=127.0.0.1:$RDZVD_PORT
args=(--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=nostore
      --rdzv_conf="$conf" --recovery=live --max_restarts=1 --no_python
      --nproc_per_node=1)
CDRUN=$T/nolib/bin/cdrun agent a "${args[@]}" "$LW" "$T/a"
wait_grep "job nostore: .* joined round 0" "$T/rdzvd.log" 30   # a ranks first
agent b "${args[@]}" "$LW" "$T/b"
all_end a b
expect_grep "node rank 0 cannot serve the live store \(live recovery needs libpg.so .*\): the job cannot run with --recovery=live" "$T/a.err"
expect_grep "node rank 0 cannot serve the live store" "$T/b.err"
compgen -G "$T/a/env.*" >/dev/null && fail "node 0 started workers"
expect_grep "job nostore: cannot serve its live store \(live recovery needs libpg.so .*\): its agents fall back to node 0's" "$T/rdzvd.log"

# ---- elastic: node 0 alone in restart mode, then a node joins ----
mkdir "$T/c" "$T/e"
el=(--nnodes=1:2 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=alone
    --rdzv_conf="$conf" --recovery=live --max_restarts=1 --no_python
    --nproc_per_node=1)
CDRUN=$T/nolib/bin/cdrun agent c "${el[@]}" "$LW" "$T/c"
wait_files "$T/c/env.*" 1 30
expect_grep "cannot serve the live store \(.*\): live recovery is off" "$T/c.err"
agent e "${el[@]}" "$LW" "$T/e"
all_end c e
expect_grep "node rank 0 cannot serve the live store" "$T/e.err"
exit 0
