#!/bin/bash
# No rdzvd: the agent whose endpoint is its own host serves the rendezvous
# itself, and stays up after its own workers finish until the others have
# left.
. "$(dirname "$0")/lib.sh"

port=$(free_port)
mkdir "$T/e"
# The host's workers finish at once; the other node's run 2 s longer.
agent host --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=emb "$TW" env "$T/e"
agent late --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=emb --rdzv_conf=is_host=0 \
  "$TW" elastic "$T/e" 2
wait_exit "$AGENT_late" 30
[ "$RC" -eq 0 ] || { cat "$T/late.err" "$T/host.err"; fail "late agent exited $RC"; }
wait_exit "$AGENT_host" 10
[ "$RC" -eq 0 ] || { cat "$T/host.err"; fail "host agent exited $RC"; }
expect_grep 'hosting the rendezvous' "$T/host.err"
[ -f "$T/e/ws2.1" ] || [ -f "$T/e/ws2.0" ] || fail "the late node's worker did not run"
exit 0
