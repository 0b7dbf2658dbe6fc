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
