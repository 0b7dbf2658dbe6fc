#!/bin/bash
# 2 and 4 agents through a real rdzvd: ranks, world sizes, offsets for
# unequal nproc, one MASTER_ADDR/PORT on every worker; all exit 0.
. "$(dirname "$0")/lib.sh"

start_rdzvd
ep=127.0.0.1:$RDZVD_PORT

mkdir "$T/two"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d \
    --rdzv_endpoint="$ep" --rdzv_id=two "$TW" env "$T/two"
done
wait_exit "$AGENT_a" 30; [ "$RC" -eq 0 ] || { cat "$T/a.err"; fail "agent a exited $RC"; }
wait_exit "$AGENT_b" 30; [ "$RC" -eq 0 ] || { cat "$T/b.err"; fail "agent b exited $RC"; }
check_world "$T/two" env 4

# Four agents with unequal nproc (1, 2, 3, 2): world 8, offsets by rank.
mkdir "$T/four"
i=0
for np in 1 2 3 2; do
  agent "n$i" --nnodes=4 --nproc-per-node=$np --rdzv-backend=rdzvd \
    --rdzv-endpoint="$ep" --rdzv-id=four "$TW" env "$T/four"
  i=$((i + 1))
done
for i in 0 1 2 3; do
  pid_var=AGENT_n$i
  wait_exit "${!pid_var}" 30
  [ "$RC" -eq 0 ] || { cat "$T/n$i.err"; fail "agent n$i exited $RC"; }
done
check_world "$T/four" env 8
expect_eq "MASTER_ADDR" "$(envval "$T/four/env.0" MASTER_ADDR)" 127.0.0.1

# The daemon's log says what happened to each job.
expect_grep "four.*round 0 complete" "$T/rdzvd.log"

# The status query lists what the daemon knows (finished jobs linger for
# close_timeout).
"$RDZVD" --status "$ep" >"$T/status" || fail "rdzvd --status failed"
expect_grep '^[0-9]+ job\(s\)' "$T/status"
"$RDZVD" --status "$ep" --json >"$T/status.json" || fail "--status --json"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$T/status.json" ||
  fail "status JSON does not parse"

# IPv6: a daemon on [::1], agents with a bracketed endpoint.
if ip -6 addr show lo 2>/dev/null | grep -q '::1'; then
  "$RDZVD" --host ::1 --port 0 2>"$T/rdzvd6.log" &
  pid6=$!
  STARTED+=("$pid6")
  wait_files "$T/rdzvd6.log" 1 5
  for ((i = 0; i < 100; i++)); do
    port6=$(sed -n 's/^rdzvd: listening on .*:\([0-9]*\) .*/\1/p' "$T/rdzvd6.log")
    [ -n "$port6" ] && break
    sleep 0.05
  done
  [ -n "$port6" ] || fail "rdzvd on ::1 did not start: $(cat "$T/rdzvd6.log")"
  mkdir "$T/six"
  for n in p q; do
    agent "$n" --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint="[::1]:$port6" \
      --rdzv_id=six "$TW" env "$T/six"
  done
  wait_exit "$AGENT_p" 30; [ "$RC" -eq 0 ] || { cat "$T/p.err"; fail "IPv6 agent p: $RC"; }
  wait_exit "$AGENT_q" 30; [ "$RC" -eq 0 ] || { cat "$T/q.err"; fail "IPv6 agent q: $RC"; }
  check_world "$T/six" env 2
  expect_eq "IPv6 MASTER_ADDR" "$(envval "$T/six/env.1" MASTER_ADDR)" ::1
else
  echo "note: no IPv6 loopback; the IPv6 part was skipped" >&2
fi
exit 0
