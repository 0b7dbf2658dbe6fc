#!/bin/bash
# Bytes a peer sent never reach a log, --status or cdrun's output raw
# (issue 19, item 6): a job id and a host name with a newline, a forged
# "rdzvd:" line and terminal escapes, and a worker failure message that a
# peer's agent passes on, are escaped ("\n", "\x1b") wherever they are
# shown.
. "$(dirname "$0")/lib.sh"

# ctl FILE: true when FILE holds a control byte other than newline/tab.
ctl() {
  LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$1"
}
no_raw() {   # no_raw WHAT FILE
  ! ctl "$2" || { cat -v "$2" >&2; fail "$1: raw control bytes"; }
  ! grep -Eq '^([0-9-]+ [0-9:.]+ )?rdzvd: forged' "$2" ||
    { cat -v "$2" >&2; fail "$1: a forged line"; }
}

: >"$T/rdzvd.err"
"$RDZVD" --host 127.0.0.1 --port 0 --log-file "$T/rdzvd.log" \
  2>>"$T/rdzvd.err" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
for ((i = 0; i < 200; i++)); do
  RDZVD_PORT=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' \
                 "$T/rdzvd.err")
  [ -n "$RDZVD_PORT" ] && break
  sleep 0.05
done
[ -n "${RDZVD_PORT:-}" ] || fail "rdzvd did not start: $(cat "$T/rdzvd.err")"
ep=127.0.0.1:$RDZVD_PORT

# A stranger joins a 2-node job whose id forges a log line and paints the
# terminal, under a host name that does the same; it waits on the list.
ID=$'evil\n2026-01-01 00:00:00.000 rdzvd: forged\x1b[31m\x1b[2J'
python3 - "$RDZVD_PORT" "$ID" <<'PY' >"$T/join.out" &
import json, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
body = json.dumps({"v": 2, "op": "join", "id": sys.argv[2],
                   "host": "h\x1b]0;title\x07\r\n", "nproc": 1,
                   "master_port": 29500,
                   "conf": {"min_nodes": 2, "max_nodes": 2}}).encode()
s.sendall(struct.pack(">I", len(body)) + body)
n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
print(json.loads(s.recv(n, socket.MSG_WAITALL))["op"], flush=True)
s.recv(1)      # holds the connection until killed
PY
JOINER=$!
STARTED+=("$JOINER")
wait_grep '^waiting$' "$T/join.out" 30

"$RDZVD" --status "$ep" >"$T/status" || fail "rdzvd --status failed"
"$RDZVD" --status "$ep" --json >"$T/status.json" ||
  fail "rdzvd --status --json failed"
"$RDZVD" --status "$ep" --job "$ID" >"$T/status.job" ||
  fail "rdzvd --status --job failed"
no_raw "--status" "$T/status"
no_raw "--status --json" "$T/status.json"
no_raw "--status --job" "$T/status.job"
expect_grep '^job evil\\n2026-01-01 00:00:00\.000 rdzvd: forged\\x1b\[31m\\x1b\[2J: gathering' "$T/status"
expect_grep 'h\\x1b\]0;title\\x07\\r\\n' "$T/status.job"
python3 - "$T/status.json" "$ID" <<'PY' || fail "--status --json lost the id"
import json, sys
st = json.load(open(sys.argv[1]))
assert st["jobs"][0]["id"] == sys.argv[2], st["jobs"][0]["id"]
PY
kill "$JOINER"; wait "$JOINER" 2>/dev/null
no_raw "the log file" "$T/rdzvd.log"
expect_grep 'job evil\\n2026-01-01 00:00:00\.000 rdzvd: forged\\x1b\[31m\\x1b\[2J: created' "$T/rdzvd.log"

# A worker's failure message travels to the other node's agent (restart
# reason, closed message) and into its own summary: escaped in both.
MSG='boom\nrdzvd: forged\u001b[31m'
mkdir "$T/w"
agent a --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="$ep" --rdzv_id=msg --max_restarts=0 \
  "$TW" errfile "$MSG"
agent b --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="$ep" --rdzv_id=msg --max_restarts=0 \
  "$TW" sleep "$T/w" 120
wait_exit "$AGENT_a" 60; [ "$RC" -ne 0 ] || fail "agent a exited 0"
wait_exit "$AGENT_b" 60; [ "$RC" -ne 0 ] || fail "agent b exited 0"
no_raw "the failing agent" "$T/a.err"
no_raw "the other agent" "$T/b.err"
expect_grep 'Traceback: boom$' "$T/a.err"
expect_grep '^  rdzvd: forged\\x1b\[31m at rank [01]$' "$T/a.err"
expect_grep '^cdrun: .*boom\\nrdzvd: forged\\x1b\[31m' "$T/b.err"
no_raw "the log file" "$T/rdzvd.log"

kill "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30
exit 0
