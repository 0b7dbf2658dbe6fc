#!/bin/bash
# cdrun --recovery=live, a job whose workers finish (issue 30, defect 2):
# libpg workers (pg_live_worker, three on one node) all finish their
# steps; rank 1 is SIGKILLed after its last step, once its peers have
# exited 0 and cdrun has reaped them.  A replacement could not rejoin
# peers that are gone (it waited PG_TIMEOUT for a generation, and the
# job ended FAILED): the agent recovers as restart mode does, and the
# job ends as it does in restart mode: the group restarts once and
# exits 0.  PG_TIMEOUT is lowered: a replacement that waits fails the
# scenario through its exit status, never through the time.
. "$(dirname "$0")/lib.sh"
PG_LIVE_WORKER=$(dirname "$TW")/pg_live_worker
[ -x "$PG_LIVE_WORKER" ] || fail "no $PG_LIVE_WORKER"
export PG_TIMEOUT=15

# The worker: pg_live_worker; rank 1 of the first attempt then waits
# until its peers are reaped and is SIGKILLed.
W=$T/finishworker.sh
cat >"$W" <<'SH'
#!/bin/bash
d=$1
shift
echo $$ >"$d/pid.$RANK.$$"
"$@" || exit $?
if [ "$RANK" = 1 ] && [ "${TORCHELASTIC_RESTART_COUNT:-0}" = 0 ] &&
   [ "${CDRUN_WORKER_RESTARTS:-0}" = 0 ]; then
  for f in "$d"/pid.0.* "$d"/pid.2.*; do
    p=$(cat "$f")
    while [ -e "/proc/$p" ]; do sleep 0.05; done
  done
  echo "rank 1 dies after its last step" >&2
  kill -9 $$
fi
SH
chmod +x "$W"

# run MODE: the job in MODE (live or restart); its exit status in RC.
run() {
  mkdir "$T/$1"
  bg_cdrun --standalone --nproc_per_node=3 --recovery="$1" --max_restarts=1 \
    --log_dir "$T/logs-$1" --no_python "$W" "$T/$1" "$PG_LIVE_WORKER" 8 3000
  wait_exit "$BG" 120
  cp "$T/err" "$T/$1.err"
}

run restart
[ "$RC" = 0 ] || { cat "$T/restart.err" >&2; fail "restart mode exited $RC"; }
expect_grep 'rank 1 dies after its last step' "$T/restart.err"

run live
if [ "$RC" != 0 ]; then
  cat "$T/live.err" >&2
  fail "live mode exited $RC, restart mode 0"
fi
expect_grep 'rank 1 dies after its last step' "$T/live.err"
expect_grep 'worker 1 failed after worker [02] finished \(exit 0\): a replacement could not rejoin its peers; recovering as restart mode does' \
  "$T/live.err"
grep -q 'replacing worker 1 alone' "$T/live.err" &&
  fail "a replacement was started for a finished job"
# As restart mode: the group ran twice, the second time to the end.
expect_eq "live mode's attempts" "$(compgen -G "$T/live/pid.1.*" | wc -l)" \
  "$(compgen -G "$T/restart/pid.1.*" | wc -l)"
exit 0
