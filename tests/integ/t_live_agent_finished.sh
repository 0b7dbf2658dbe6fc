#!/bin/bash
# cdrun --recovery=live, a job whose workers finish (issue 30, defect 2):
# libpg workers (pg_live_worker, three on one node) all finish their
# steps, and rank 1 is SIGKILLed after its last step.
#  - its peers have already exited 0 (and cdrun reaped them): a
#    replacement could not rejoin peers that are gone (it waited
#    PG_TIMEOUT for a generation, and the job ended FAILED);
#  - its peers exit 0 only once its replacement started: the
#    replacement, still joining, never can.
# Either way the agent recovers as restart mode does, and the job ends
# as it does in restart mode: the group restarts once and exits 0.
# PG_TIMEOUT is lowered: a replacement that waits fails the scenario
# through the exit status, never through the time.
. "$(dirname "$0")/lib.sh"
PG_LIVE_WORKER=$(dirname "$TW")/pg_live_worker
[ -x "$PG_LIVE_WORKER" ] || fail "no $PG_LIVE_WORKER"
export PG_TIMEOUT=15

# The worker: pg_live_worker, then in the first attempt: rank 1 waits
# until its peers are reaped (HOLD unset) and is SIGKILLed; with HOLD,
# rank 1 is SIGKILLed at once and its peers wait for DIR/release.
W=$T/finishworker.sh
cat >"$W" <<'SH'
#!/bin/bash
d=$1
shift
echo $$ >"$d/pid.$RANK.$$"
"$@" || exit $?
[ "${TORCHELASTIC_RESTART_COUNT:-0}" = 0 ] &&
  [ "${CDRUN_WORKER_RESTARTS:-0}" = 0 ] || exit 0
if [ "$RANK" = 1 ]; then
  for f in "$d"/pid.0.* "$d"/pid.2.*; do
    p=$(cat "$f")
    while [ -z "${HOLD:-}" ] && [ -e "/proc/$p" ]; do sleep 0.05; done
  done
  echo "rank 1 dies after its last step" >&2
  kill -9 $$
fi
while [ -n "${HOLD:-}" ] && [ ! -e "$d/release" ]; do sleep 0.05; done
SH
chmod +x "$W"

# start NAME MODE [VAR=VALUE...]: the job in MODE (live or restart).
start() {
  local name=$1 mode=$2
  shift 2
  mkdir "$T/$name"
  env "$@" "$CDRUN" --standalone --nproc_per_node=3 --recovery="$mode" \
    --max_restarts=1 --log_dir "$T/logs-$name" --no_python "$W" \
    "$T/$name" "$PG_LIVE_WORKER" 8 3000 >"$T/$name.out" 2>"$T/$name.err" &
  BG=$!
  STARTED+=("$BG")
}

# ended NAME: the job exited 0, as restart mode's did, after rank 1's
# death, with the group run twice (rank 1 three times: its replacement
# too, when it started one).
ended() {
  wait_exit "$BG" 120
  if [ "$RC" != 0 ]; then
    cat "$T/$1.err" >&2
    fail "$1 exited $RC, restart mode 0"
  fi
  expect_grep 'rank 1 dies after its last step' "$T/$1.err"
  expect_eq "$1: rank 0's attempts" "$(compgen -G "$T/$1/pid.0.*" | wc -l)" 2
}

start restart restart
ended restart

start after live
ended after
expect_grep 'worker 1 failed after worker [02] finished \(exit 0\): a '\
'replacement could not rejoin its peers; recovering as restart mode does' \
  "$T/after.err"
grep -q 'replacing worker 1 alone' "$T/after.err" &&
  fail "a replacement was started for a finished job"

# The other order: the replacement starts, then the peers exit 0.
start before live HOLD=1
wait_grep 'replacing worker 1 alone' "$T/before.err" 30
wait_files "$T/before/pid.1.*" 2 30
touch "$T/before/release"
ended before
expect_grep "worker [02] finished \(exit 0\) while worker 1's replacement "\
"was still joining: it never can; stopping it" "$T/before.err"
expect_eq "stopped once" "$(grep -c 'still joining' "$T/before.err")" 1
exit 0
