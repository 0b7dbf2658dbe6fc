#!/bin/bash
# cdrun --recovery=live on rdzvd when node rank 0 cannot serve the live
# store (no libpg.so beside its cdrun): the other nodes' workers could not
# reach it, so node 0 ends the job with a final failure that names the
# reason, and every node ends with it, its workers stopped (Note [no live
# store]); so does an elastic job's node 0 that ran alone in restart mode
# for it when a node joins.  (A job of one node falls back to restart
# mode: t_live_agent.sh.)
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

start_rdzvd
ep=127.0.0.1:$RDZVD_PORT
conf=last_call_timeout=0.5,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5
args=(--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=nostore
      --rdzv_conf="$conf" --recovery=live --max_restarts=1 --no_python
      --nproc_per_node=1)
mkdir -p "$T/nolib/bin" "$T/a" "$T/b"
cp "$CDRUN" "$T/nolib/bin/cdrun"
CDRUN=$T/nolib/bin/cdrun agent a "${args[@]}" "$LW" "$T/a"
wait_grep "job nostore: .* joined round 0" "$T/rdzvd.log" 30   # a ranks first
agent b "${args[@]}" "$LW" "$T/b"
all_end a b
expect_grep "node rank 0 cannot serve the live store \(live recovery needs libpg.so .*\): the job cannot run with --recovery=live" "$T/a.err"
expect_grep "node rank 0 cannot serve the live store" "$T/b.err"
compgen -G "$T/a/env.*" >/dev/null && fail "node 0 started workers"

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
