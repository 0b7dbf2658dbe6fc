# rootcause_lib.sh -- Note [root cause] across nodes, shared by the
# rendezvous back ends (t_mn_rootcause: rdzvd, t_etcd_rootcause: etcd).
#
# rootcause_scenario BACKEND ENDPOINT REPORTED: node B's rank 2 fails
# first (a full disk, exit 28, with an error file), node A's rank 0 a
# moment later (exit 104), and A's report reaches the rendezvous first.
# Both agents' summaries name B's rank 2 as the root cause, A's lists its
# own failure above it, and both exit 28.  The order is forced by events,
# not timing: B's agent is SIGSTOPped before its worker fails and
# continued once the command REPORTED has seen A's report in the
# rendezvous (it waits, or fails the test).

# root_field FILE NAME: a field of the Root Cause block.
root_field() {
  sed -n "/^Root Cause/,\$ s/^  $2 *: //p" "$1"
}

rootcause_scenario() {
  local backend=$1 ep=$2 reported=$3 W=$T/w A B na nb n rca rcb
  mkdir "$W"
  # A keepalive window (4 s x 30) far longer than B's stop lasts.
  for n in p q; do
    agent "$n" --nnodes=2 --nproc_per_node=2 --rdzv_backend="$backend" \
      --rdzv_endpoint="$ep" --rdzv_id=rootcause \
      --max_restarts=0 \
      --rdzv_conf=keepalive_interval=4,keepalive_misses=30 \
      "$TW" failon "$W"
  done
  wait_files "$W/ready.*" 4 60
  # B is the node of global rank 2 (so a tie on time would favour A's).
  B=$(cat "$W/ppid.2")
  A=$(cat "$W/ppid.0")
  [ "$A" != "$B" ] || fail "ranks 0 and 2 on one agent"
  if [ "$B" = "$AGENT_p" ]; then nb=p na=q; else nb=q na=p; fi
  expect_eq "B is an agent" "$(eval echo "\$AGENT_$nb")" "$B"

  kill -STOP "$B"
  echo "28 e" >"$W/fail.2.tmp" && mv "$W/fail.2.tmp" "$W/fail.2"
  wait_files "$W/exited.2" 1 30
  echo "104" >"$W/fail.0.tmp" && mv "$W/fail.0.tmp" "$W/fail.0"
  "$reported"
  kill -CONT "$B"

  wait_exit "$A" 120; rca=$RC
  wait_exit "$B" 120; rcb=$RC
  for n in "$na" "$nb"; do
    expect_grep '^Root Cause \(first observed failure\):$' "$T/$n.err"
    expect_eq "$n: root cause rank" "$(root_field "$T/$n.err" rank)" \
      "2 (local_rank: 0)"
    expect_eq "$n: root cause exit code" \
      "$(root_field "$T/$n.err" exitcode | sed 's/ (pid.*//')" 28
  done
  expect_eq "A's exit status" "$rca" 28
  expect_eq "B's exit status" "$rcb" 28
  # A's own failure is listed above the root cause; B's carries its error
  # file's message.
  expect_grep '^  rank      : 0 \(local_rank: 0\)$' "$T/$na.err"
  expect_grep '^  exitcode  : 104 ' "$T/$na.err"
  expect_grep "the job's root cause: rank 2 on " "$T/$na.err"
  expect_grep 'No space left on device \(rank 2\)' "$T/$nb.err"
  expect_grep '<NO_OTHER_FAILURES>' "$T/$nb.err"
}

# rootcause_reap_late_scenario BACKEND ENDPOINT REPORTED: Note [exit
# time] (launcher/guardian.h).  As above, but B's worker writes no error
# file (a plain script that exits 7): only the time it exited can rank
# it.  B's agent is stopped when its worker exits, so it reaps the worker
# only after A's worker has exited (9) and A's report is in; both
# summaries must still blame B's exit 7, the first by exit time, not A's
# exit 9, the first reaped.  Job id reaplate; REPORTED as above.
rootcause_reap_late_scenario() {
  local backend=$1 ep=$2 reported=$3 W=$T/rl A B na nb n rca rcb w2 i
  mkdir "$W"
  for n in r s; do
    agent "$n" --nnodes=2 --nproc_per_node=2 --rdzv_backend="$backend" \
      --rdzv_endpoint="$ep" --rdzv_id=reaplate \
      --max_restarts=0 \
      --rdzv_conf=keepalive_interval=4,keepalive_misses=30 \
      "$TW" failon "$W"
  done
  wait_files "$W/ready.*" 4 60
  B=$(cat "$W/ppid.2")
  A=$(cat "$W/ppid.0")
  [ "$A" != "$B" ] || fail "ranks 0 and 2 on one agent"
  if [ "$B" = "$AGENT_r" ]; then nb=r na=s; else nb=s na=r; fi
  w2=$(cat "$W/pid.2")

  kill -STOP "$B"
  echo "7" >"$W/fail.2.tmp" && mv "$W/fail.2.tmp" "$W/fail.2"
  # B's worker has exited (a zombie: its agent is stopped) before A's.
  for ((i = 0; i < 600; i++)); do
    [ "$(ps -o stat= -p "$w2" 2>/dev/null | cut -c1)" = Z ] && break
    sleep 0.05
  done
  [ "$(ps -o stat= -p "$w2" | cut -c1)" = Z ] || fail "B's worker did not exit"
  echo "9" >"$W/fail.0.tmp" && mv "$W/fail.0.tmp" "$W/fail.0"
  "$reported"
  kill -CONT "$B"

  wait_exit "$A" 120; rca=$RC
  wait_exit "$B" 120; rcb=$RC
  for n in "$na" "$nb"; do
    expect_grep '^Root Cause \(first observed failure\):$' "$T/$n.err"
    expect_eq "$n: root cause rank" "$(root_field "$T/$n.err" rank)" \
      "2 (local_rank: 0)"
    expect_eq "$n: root cause exit code" \
      "$(root_field "$T/$n.err" exitcode | sed 's/ (pid.*//')" 7
  done
  expect_eq "A's exit status" "$rca" 7
  expect_eq "B's exit status" "$rcb" 7
}
