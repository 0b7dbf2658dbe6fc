#!/bin/bash
# The embedded host listens on the endpoint's address only: with a
# loopback endpoint, another loopback address of the machine (127.0.0.2)
# finds nothing listening, while the endpoint itself answers status.
. "$(dirname "$0")/lib.sh"

: "${RDZVD:?RDZVD must point to bin/rdzvd}"
port=$(free_port)
mkdir "$T/e"
# Two nodes expected, one started: the host waits, serving.
agent host --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=bind --rdzv_conf=join_timeout=60 \
  "$TW" env "$T/e"
for ((i = 0; i < 600; i++)); do
  grep -q 'hosting the rendezvous' "$T/host.err" && break
  alive "$AGENT_host" || { cat "$T/host.err"; fail "host agent exited"; }
  sleep 0.05
done
expect_grep "hosting the rendezvous for 'bind' on 127\.0\.0\.1:$port" \
  "$T/host.err"
"$RDZVD" --status "127.0.0.1:$port" >"$T/st1" 2>&1 || {
  cat "$T/st1"; fail "no status at the endpoint"; }
expect_grep 'job bind' "$T/st1"
if "$RDZVD" --status "127.0.0.2:$port" >"$T/st2" 2>&1; then
  cat "$T/st2"
  fail "the embedded host answers on 127.0.0.2: it listens on more than the endpoint"
fi
expect_grep 'cannot connect|refused' "$T/st2"
kill -TERM "$AGENT_host"
wait_exit "$AGENT_host" 30
exit 0
