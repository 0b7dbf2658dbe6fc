#!/bin/bash
# cdrun --recovery=live on one node, with a worker that implements the
# handshake (live_agent_lib.sh): a SIGKILLed worker is replaced alone
# (its peers untouched; the replacement has its RANK and
# CDRUN_WORKER_RESTARTS=1; the live store serves on MASTER_PORT+2); the
# per-rank budget (--max_restarts) ends the job truthfully; a replacement
# counts as opted in; a worker that does not opt in turns failures to
# restart mode, said once; restart mode
# gives no live variables and does not load libpg; a cdrun that cannot
# load libpg says so and runs in restart mode.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/live_agent_lib.sh"

# ---- a worker replaced alone, then the rank's budget spent ----
mkdir "$T/r"
bg_cdrun --standalone --nproc_per_node=3 --recovery=live --max_restarts=1 \
  --log_dir "$T/logs" --event_log_handler=console --no_python "$LW" "$T/r"
wait_files "$T/r/env.*" 3 30
p0=$(pid_of "$T/r" 0); p1=$(pid_of "$T/r" 1); p2=$(pid_of "$T/r" 2)
e0=$(compgen -G "$T/r/env.0.*")
grep -q "live store" "$T/err" && fail "no live store: $(cat "$T/err")"
expect_eq CDRUN_RECOVERY "$(envval "$e0" CDRUN_RECOVERY)" live
expect_eq CDRUN_WORKER_RESTARTS "$(envval "$e0" CDRUN_WORKER_RESTARTS)" 0
mp=$(envval "$e0" MASTER_PORT)
expect_eq CDRUN_LIVE_STORE "$(envval "$e0" CDRUN_LIVE_STORE)" \
  "$(envval "$e0" MASTER_ADDR):$((mp + 2))"
grep -q libpg.so "/proc/$BG/maps" || fail "live mode did not load libpg"
python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)' \
  $((mp + 2)) || fail "nothing serves the live store on MASTER_PORT+2"
rf=$(envval "$e0" CDRUN_LIVE_ROUND_FILE)
expect_eq "round file" "$(cat "$rf")" "round=0 world=3 rank_offset=0 local_world=3"
wait_files "$T/r/round.$p2" 1 20
expect_eq "the worker's round" "$(cat "$T/r/round.$p2")" "$(cat "$rf")"

kill -KILL "$p1"
wait_files "$T/r/env.1.*" 2 30
for f in "$T"/r/env.1.*; do
  [ "$f" = "$T/r/env.1.$p1" ] || e1=$f
done
expect_eq "replacement RANK" "$(envval "$e1" RANK)" 1
expect_eq "replacement CDRUN_WORKER_RESTARTS" \
  "$(envval "$e1" CDRUN_WORKER_RESTARTS)" 1
expect_eq "replacement LOCAL_RANK" "$(envval "$e1" LOCAL_RANK)" 1
expect_eq "replacement job token" "$(envval "$e1" CDRUN_JOB_TOKEN)" \
  "$(envval "$e0" CDRUN_JOB_TOKEN)"
case $(envval "$e1" CDRUN_LIVE_OPT_IN) in
  */attempt_0/1/live_1/live_opt_in) ;;
  *) fail "replacement's opt-in file: $(envval "$e1" CDRUN_LIVE_OPT_IN)" ;;
esac
expect_eq "peer 0 untouched" "$(pid_of "$T/r" 0)" "$p0"
expect_eq "peer 2 untouched" "$(pid_of "$T/r" 2)" "$p2"
alive "$p0" && alive "$p2" || fail "a peer of the replaced worker died"
expect_grep "replacing worker 1 alone \(live recovery" "$T/err"
grep -q "restarting the worker group" "$T/err" && fail "the group restarted"
expect_grep "event WORKER_REPLACED .*rank=1 local_rank=1 pid=$p1 exitcode=-9 worker_restarts=1" "$T/err"
grep -q "event RESTART" "$T/err" && fail "a replacement logged as a restart"

# The replacement is killed too: rank 1's budget (1) is spent.
kill -KILL "$(cat "$e1" | sed -n 's/^CDRUN_LIVE_OPT_IN=//p' | xargs cat)"
wait_exit "$BG" 30
expect_eq "exit status (SIGKILL)" "$RC" 137
expect_grep "worker 1 has no replacement left \(1 of --max_restarts 1 used" "$T/err"
expect_grep "Root Cause" "$T/err"
expect_grep "rank +: 1" "$T/err"
expect_eq "replacements" "$(grep -c 'replacing worker' "$T/err")" 1
for p in "$p0" "$p2"; do alive "$p" && fail "worker $p outlived cdrun"; done

# ---- a replacement counts as opted in from its start ----
mkdir "$T/i"
NO_OPTIN_REPLACED=1 bg_cdrun --standalone --nproc_per_node=2 \
  --recovery=live --max_restarts=2 --no_python "$LW" "$T/i"
wait_files "$T/i/round.*" 2 30
kill -KILL "$(pid_of "$T/i" 0)"
wait_files "$T/i/env.0.*" 2 30
wait_files "$T/i/round.*" 3 30
for f in "$T"/i/pid.0.*; do alive "$(cat "$f")" && kill -KILL "$(cat "$f")"; done
wait_files "$T/i/env.0.*" 3 30
expect_eq "replacements" "$(grep -c 'replacing worker 0 alone' "$T/err")" 2
grep -q "did not opt in" "$T/err" && fail "a replacement was not opted in"
touch "$T/i/stop"
wait_exit "$BG" 30
expect_eq "exit after replacements" "$RC" 0

# ---- a worker that does not opt in: restart mode, said once ----
mkdir "$T/f"
NO_OPTIN_RANK=2 bg_cdrun --standalone --nproc_per_node=3 --recovery=live \
  --max_restarts=1 --no_python "$LW" "$T/f"
wait_files "$T/f/env.*" 3 30
wait_files "$T/f/round.*" 3 30    # every worker is past its opt-in
kill -KILL "$(pid_of "$T/f" 0)"
wait_files "$T/f/env.*" 6 30      # the whole group restarted
expect_grep "worker 2 \(pid [0-9]+\) did not opt in to live recovery: restarting the worker group instead" "$T/err"
expect_grep "worker group failed; restarting it" "$T/err"
grep -q "replacing worker" "$T/err" && fail "replaced a worker alone"
wait_files "$T/f/round.*" 6 30
last=
for f in "$T"/f/pid.*; do
  alive "$(cat "$f")" && last=$(cat "$f")
done
[ -n "$last" ] || fail "no worker of the restarted group runs"
kill -KILL "$last"
wait_exit "$BG" 30
[ "$RC" -ne 0 ] || fail "the fallback job exited 0"
expect_eq "opt-in fallback said" "$(grep -c 'did not opt in' "$T/err")" 1

# ---- restart mode: no live variables, no libpg ----
mkdir "$T/s"
CDRUN_RECOVERY=live CDRUN_LIVE_STORE=x:1 bg_cdrun --standalone \
  --nproc_per_node=1 --no_python "$LW" "$T/s"
wait_files "$T/s/env.*" 1 30
f=$(compgen -G "$T/s/env.0.*")
grep -q '^CDRUN_RECOVERY=\|^CDRUN_LIVE_\|^CDRUN_WORKER_RESTARTS=' "$f" &&
  fail "restart mode gave live variables: $(grep ^CDRUN_ "$f")"
grep -q libpg "/proc/$BG/maps" && fail "restart mode loaded libpg"
touch "$T/s/stop"
wait_exit "$BG" 30
expect_eq "restart mode's exit" "$RC" 0

# ---- no libpg beside cdrun: said, restart mode ----
mkdir -p "$T/nolib/bin" "$T/n"
cp "$CDRUN" "$T/nolib/bin/cdrun"
"$T/nolib/bin/cdrun" --standalone --nproc_per_node=1 --recovery=live \
  --no_python "$LW" "$T/n" >"$T/n.out" 2>"$T/n.err" &
NB=$!
STARTED+=("$NB")
wait_files "$T/n/env.*" 1 30
f=$(compgen -G "$T/n/env.0.*")
grep -q '^CDRUN_RECOVERY=' "$f" && fail "live variables without a live store"
touch "$T/n/stop"
wait_exit "$NB" 30
expect_eq "exit without libpg" "$RC" 0
expect_grep "cannot serve the live store \(live recovery needs libpg.so .*\): live recovery is off" "$T/n.err"
expect_eq "said once" "$(grep -c 'cannot serve the live store' "$T/n.err")" 1
exit 0
