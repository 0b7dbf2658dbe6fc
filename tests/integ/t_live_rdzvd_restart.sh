#!/bin/bash
# rdzvd restarted under a live job (Note [live store in rdzvd]): the live
# store it served is gone with it, and the workers could not recover
# without one.  The agents reconnect and re-assert; once the rebuilt round
# is whole the new daemon starts a round (no restart counted) with a new
# store, and the agents restart their workers in it, with the new store
# in CDRUN_LIVE_STORE (TORCHELASTIC_RESTART_COUNT still 0); the job then
# ends 0.  (Without it the workers ran on with the old store's address,
# and their next failure cost a PG_TIMEOUT per replacement.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"
. "$(dirname "$0")/live_agent_lib.sh"

start_rdzvd
port=$RDZVD_PORT
conf=last_call_timeout=0.5,join_timeout=30,keepalive_interval=0.2,keepalive_misses=5
args=(--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:"$port"
      --rdzv_id=rr --rdzv_conf="$conf" --recovery=live --max_restarts=0
      --no_python --nproc_per_node=1)
mkdir "$T/a" "$T/b"
agent a "${args[@]}" "$LW" "$T/a"
wait_grep "job rr: .* joined round 0" "$T/rdzvd.log" 30   # a ranks first
agent b "${args[@]}" "$LW" "$T/b"
wait_files "$T/a/round.*" 1 30
wait_files "$T/b/round.*" 1 30
old=$(sed -n 's/.*job rr: live store on port \([0-9]*\)$/\1/p' "$T/rdzvd.log")
[ -n "$old" ] || fail "rdzvd served no live store"
a0=$(pid_of "$T/a" 0)
b1=$(pid_of "$T/b" 1)

kill_rdzvd KILL
for n in a b; do
  wait_grep "lost the rendezvous server 127.0.0.1:$port: .*workers keep running" "$T/$n.err" 30
done
rdzvd_on "$port" "$T/rdzvd2.log"
wait_grep "job rr: round 0 rebuilt: all 2 nodes re-asserted it" "$T/rdzvd2.log" 30
wait_grep "job rr: its live store went with the rendezvous' restart: a new round, with a new one" \
  "$T/rdzvd2.log" 30
for n in a b; do
  wait_grep "the job needs a new round \(the rendezvous restarted: the job's live store is gone\)" \
    "$T/$n.err" 30
  wait_grep "round 1 moves the master endpoint or the live store, .*restarting them" \
    "$T/$n.err" 30
done
wait_files "$T/a/env.0.*" 2 30
wait_files "$T/b/env.1.*" 2 30
new=$(sed -n 's/.*job rr: live store on port \([0-9]*\)$/\1/p' "$T/rdzvd2.log")
[ -n "$new" ] || fail "the new rdzvd served no live store"
for f in "$T"/a/env.0.* "$T"/b/env.1.*; do
  case $f in
  */env.0.$a0 | */env.1.$b1) want=$old ;;
  *) want=$new ;;
  esac
  expect_grep "^CDRUN_LIVE_STORE=127.0.0.1:$want\$" "$f"
  expect_grep "^TORCHELASTIC_RESTART_COUNT=0\$" "$f"
done
alive "$a0" && fail "a's old worker outlived the store"
alive "$b1" && fail "b's old worker outlived the store"
touch "$T/a/stop" "$T/b/stop"
wait_exit "$AGENT_a" 30
expect_eq "a's exit" "$RC" 0
wait_exit "$AGENT_b" 30
expect_eq "b's exit" "$RC" 0
exit 0
