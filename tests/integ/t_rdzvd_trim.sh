#!/bin/bash
# rdzvd gives back what peers made it hold and then gave up: a job fills
# its key-value store with 12.5 MiB and goes; once the job is forgotten
# (close_timeout), the daemon's RSS comes back down (rdzvd/main.c, the
# trim timer), where glibc alone kept most of it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/soft_lib.sh"

# Under the sanitizers (make asan test) RSS says nothing: ASan's
# quarantine keeps freed memory.
[ -z "${ASAN_OPTIONS:-}" ] || skip "RSS under AddressSanitizer says nothing about malloc_trim"

: >"$T/rdzvd.log"
"$RDZVD" --host 127.0.0.1 --port 0 --max_close_timeout 1 2>>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
wait_grep "^rdzvd: listening on " "$T/rdzvd.log" 30
port=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/rdzvd.log")
rss() { awk '/^VmRSS/ {print $2}' "/proc/$RDZVD_PID/status"; }
base=$(rss)

python3 - "$port" "$(dirname "$0")" <<'PY'
import socket, sys
sys.path.insert(0, sys.argv[2])
from rdzv_peer import frame, read_frame
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
sock.sendall(frame({"op": "join", "id": "fill", "nproc": 1, "master_port": 1,
                    "conf": {"close_timeout": 1}}))
value = "x" * 65536
for i in range(200):
    sock.sendall(frame({"op": "kv_set", "key": "k%d" % i, "value": value}))
# The last frame asks for an answer: every set before it was stored.
sock.sendall(frame({"op": "kv_get", "key": "k199"}))
while True:
    m = read_frame(sock)
    if m is None:
        sys.exit("the daemon closed the connection")
    if m.get("op") == "kv_value":
        break
sock.close()
PY
[ $? -eq 0 ] || fail "could not fill the store"
full=$(rss)
echo "rdzvd RSS: ${base} kB at start, ${full} kB with the store full" >&2
[ "$full" -gt $((base + 8192)) ] || fail "the store did not grow the daemon"
wait_grep "job fill: forgotten" "$T/rdzvd.log" 30
for ((i = 0; i < 200; i++)); do
  now=$(rss)
  [ "$now" -le $((base + 4096)) ] && break
  sleep 0.05
done
echo "rdzvd RSS after the job was forgotten: ${now} kB" >&2
[ "$now" -le $((base + 4096)) ] ||
  fail "rdzvd kept ${now} kB after the job went (${base} kB at start)"
exit 0
