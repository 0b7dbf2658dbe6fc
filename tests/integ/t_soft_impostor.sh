#!/bin/bash
# Who may speak for a node after rdzvd restarts (Note [node tokens]).  A
# 3-node job runs with a shared secret; rdzvd (with --token-key-file, its
# own key, created at the first start) is SIGKILLed and a new one starts
# with the same secret and key file.  Before the agents come back (they are
# stopped meanwhile, so the order is not a race), a client that holds the
# secret but was never a node of the job re-asserts rank 0 of the running
# round with MASTER_ADDR 6.6.6.6.  It is refused: its token does not prove
# that rank.  The real agents then re-assert their ranks and the job goes
# on: the same worker pids, restart count 0, MASTER_ADDR 127.0.0.1.  (Before
# tokens, the impostor's claim won and every worker restarted with
# MASTER_ADDR=6.6.6.6.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"

openssl rand -hex 32 >"$T/secret" 2>/dev/null ||
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/secret"
chmod 600 "$T/secret"
: >"$T/rdzvd.log"
"$RDZVD" --host 127.0.0.1 --port 0 --secret-file "$T/secret" \
  --token-key-file "$T/token.key" 2>>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
wait_grep "^rdzvd: listening on " "$T/rdzvd.log" 30
port=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/rdzvd.log")
ep=127.0.0.1:$port
[ "$(stat -c %a "$T/token.key")" = 600 ] || fail "the token key file is not mode 600"
w=$T/w
three_agents soft "$w" --max_restarts=2 --rdzv-conf=secret_file="$T/secret"
wait_files "$w/pid.*.0.3" 3 60
p0=$(pid_of "$w" 0 0 3) p1=$(pid_of "$w" 1 0 3) p2=$(pid_of "$w" 2 0 3)
expect_eq "rank 0 MASTER_ADDR" "$(envval "$w/env.0.0.3" MASTER_ADDR)" 127.0.0.1

for n in a b c; do v=AGENT_$n; kill -STOP "${!v}"; done
kill_rdzvd KILL
rdzvd_on "$port" "$T/rdzvd2.log" --secret-file "$T/secret" \
  --token-key-file "$T/token.key"

claim='{"op":"resume","id":"soft","host":"intruder","pid":4242,"nproc":1,
  "master_port":29999,"conf":{"min_nodes":3,"max_nodes":3,"max_restarts":2},
  "phase":"running","round":0,"restart_count":0,"group_rank":0,
  "group_world_size":3,"rank_offset":0,"world_size":3,
  "master_addr":"6.6.6.6","job_master_port":29999,
  "token":"0101010101010101010101010101010101010101010101010101010101010101"}'
python3 "$(dirname "$0")/rdzv_peer.py" 127.0.0.1 "$port" \
  --secret-file "$T/secret" "$claim" >"$T/intruder.out" 2>&1
cat "$T/intruder.out"
expect_grep '"code":"auth".*does not prove rank 0 of round 0 of job soft' \
  "$T/intruder.out"
expect_grep "refused a resume from intruder .*does not prove rank 0" \
  "$T/rdzvd2.log"

for n in a b c; do v=AGENT_$n; kill -CONT "${!v}"; done
for n in a b c; do
  wait_grep "re-asserting running round 0" "$T/$n.err" 60
done
wait_grep "job soft: round 0 rebuilt: all 3 nodes re-asserted it" "$T/rdzvd2.log" 60
for r in 0 1 2; do
  v=p$r
  alive "${!v}" || fail "worker rank $r (pid ${!v}) died"
done
touch "$w/go"
for n in a b c; do expect_exit "$n" 60 0; done
[ "$(compgen -G "$w/env.*" | wc -l)" -eq 3 ] || fail "a worker was restarted: $(ls "$w")"
for r in 0 1 2; do
  expect_eq "rank $r MASTER_ADDR" "$(envval "$w/env.$r.0.3" MASTER_ADDR)" 127.0.0.1
  expect_eq "rank $r restart count" \
    "$(envval "$w/env.$r.0.3" TORCHELASTIC_RESTART_COUNT)" 0
done
grep -q "restart, new round" "$T/rdzvd2.log" && fail "the new daemon started a new round"

# Without a key file the daemon says what it cannot do.
"$RDZVD" --host 127.0.0.1 --port 0 --secret-file "$T/secret" 2>"$T/rdzvd3.log" &
pid3=$!
STARTED+=("$pid3")
wait_grep "warning: no --token-key-file: after a restart this daemon cannot check a re-asserted rank" "$T/rdzvd3.log" 30
exit 0
