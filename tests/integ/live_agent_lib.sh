#!/bin/bash
# live_agent_lib.sh -- the live-recovery scenarios' worker (sourced after
# lib.sh): a shell script that implements cdrun's side of the handshake
# without libpg (man/cdrun.1, LIVE RECOVERY).  Each incarnation opts in
# (unless its RANK is $NO_OPTIN_RANK, or NO_OPTIN_RANK=all, or it is a
# replacement and NO_OPTIN_REPLACED is set), writes its
# environment to DIR/env.<RANK>.<pid> and its pid to DIR/pid.<RANK>.<pid>,
# copies the round file to DIR/round.<pid> whenever it changes, and runs
# until DIR/stop exists; when DIR/withdraw.<pid> appears, it removes its
# opt-in file and exits 3 (a failure live recovery does not take).
LW=$T/liveworker.sh
cat >"$LW" <<'SH'
#!/bin/bash
d=$1
if [ -n "${CDRUN_LIVE_OPT_IN:-}" ] && [ "${NO_OPTIN_RANK:-x}" != "$RANK" ] &&
   [ "${NO_OPTIN_RANK:-x}" != all ] &&
   { [ -z "${NO_OPTIN_REPLACED:-}" ] || [ "$CDRUN_WORKER_RESTARTS" = 0 ]; }; then
  echo $$ >"$CDRUN_LIVE_OPT_IN"
fi
echo $$ >"$d/pid.$RANK.$$"
env >"$d/.env.$RANK.$$" && mv "$d/.env.$RANK.$$" "$d/env.$RANK.$$"
seen=
while [ ! -e "$d/stop" ]; do
  if [ -e "$d/withdraw.$$" ]; then
    rm -f "$CDRUN_LIVE_OPT_IN"
    exit 3
  fi
  if [ -n "${CDRUN_LIVE_ROUND_FILE:-}" ]; then
    line=$(cat "$CDRUN_LIVE_ROUND_FILE" 2>/dev/null)
    if [ -n "$line" ] && [ "$line" != "$seen" ]; then
      seen=$line
      echo "$line" >"$d/.round.$$" && mv "$d/.round.$$" "$d/round.$$"
    fi
  fi
  sleep 0.05
done
SH
chmod +x "$LW"

# pid_of DIR RANK: the pid of the one incarnation of RANK so far.
pid_of() {
  local f n
  n=$(compgen -G "$1/pid.$2.*" | wc -l)
  [ "$n" -eq 1 ] || fail "rank $2 has $n incarnations in $1, want 1"
  f=$(compgen -G "$1/pid.$2.*")
  cat "$f"
}

# round_of DIR PID LINE SECS: waits until worker PID's copy of its round
# file (written when the file changes) says LINE.
round_of() {
  local i
  for ((i = 0; i < $4 * 20; i++)); do
    [ "$(cat "$1/round.$2" 2>/dev/null)" = "$3" ] && return 0
    sleep 0.05
  done
  fail "worker $2's round is '$(cat "$1/round.$2" 2>/dev/null)', want '$3'"
}

# joined_live A B: node B (one worker, rank 2) joined node A's running
# workers (ranks 0 and 1, pids $a0 and $a1) live: round 1 in a world of
# 3 on both, B's worker with A's job token and live store, A's workers
# untouched; sets b0, B's worker's pid.
joined_live() {
  wait_files "$T/$2/round.*" 1 30
  b0=$(pid_of "$T/$2" 2)
  round_of "$T/$1" "$a0" "round=1 world=3 rank_offset=0 local_world=2" 30
  round_of "$T/$1" "$a1" "round=1 world=3 rank_offset=0 local_world=2" 30
  round_of "$T/$2" "$b0" "round=1 world=3 rank_offset=2 local_world=1" 30
  local ea eb
  eb=$(compgen -G "$T/$2/env.2.*")
  ea=$(compgen -G "$T/$1/env.0.*")
  expect_eq "newcomer's job token" "$(envval "$eb" CDRUN_JOB_TOKEN)" \
    "$(envval "$ea" CDRUN_JOB_TOKEN)"
  expect_eq "newcomer's live store" "$(envval "$eb" CDRUN_LIVE_STORE)" \
    "$(envval "$ea" CDRUN_LIVE_STORE)"
  expect_eq "$1's rank 0 untouched" "$(pid_of "$T/$1" 0)" "$a0"
  alive "$a0" && alive "$a1" || fail "$1's workers died when $2 joined"
}
