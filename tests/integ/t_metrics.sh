#!/bin/bash
# rdzvd --metrics: GET /metrics parses with the real Prometheus parser, and
# the values move with real agents (joins, rounds, restarts, connections,
# bytes, a refused frame).  Hostile HTTP (a huge request head, a slow one,
# more idle scrapers than allowed, wrong path and method, garbage) gets an
# answer or is closed, and leaves both ports of the daemon working; idle
# clients filling every slot do not keep a scrape out.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
SCRAPE=$(cd "$(dirname "$0")" && pwd)/prom_scrape.py
$PY -c 'import prometheus_client' 2>/dev/null ||
  skip "python3-prometheus-client is not installed"

: >"$T/rdzvd.log"
"$RDZVD" --host 127.0.0.1 --port 0 --metrics 127.0.0.1:0 \
  2>>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
for ((i = 0; i < 200; i++)); do
  RDZVD_PORT=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' \
                 "$T/rdzvd.log")
  MPORT=$(sed -n 's|^rdzvd: metrics on http://[^ ]*:\([0-9]*\)/metrics$|\1|p' \
            "$T/rdzvd.log")
  [ -n "$RDZVD_PORT" ] && [ -n "$MPORT" ] && break
  sleep 0.05
done
[ -n "${MPORT:-}" ] || { cat "$T/rdzvd.log" >&2; fail "rdzvd --metrics did not start"; }
ep=127.0.0.1:$RDZVD_PORT
URL=http://127.0.0.1:$MPORT/metrics

# scrape NAME: checks the exposition and keeps its samples in $T/NAME.
scrape() {
  $PY "$SCRAPE" "$URL" "$T/$1" || fail "scrape $1: the exposition is invalid"
}

# val FILE SAMPLE: one sample's value, as an integer.
val() {
  awk -v k="$2" '$1 == k { printf "%d\n", $2; found = 1 }
                 END { if (!found) print "missing" }' "$T/$1"
}

scrape m0
expect_eq "rounds before any job" "$(val m0 rdzvd_rounds_completed_total)" 0
expect_eq "nodes before any job" "$(val m0 rdzvd_nodes)" 0
expect_eq "auth failures" "$(val m0 rdzvd_auth_failures_total)" 0
expect_eq "reconnects" "$(val m0 rdzvd_reconnects_total)" 0
expect_eq "running jobs" "$(val m0 'rdzvd_jobs{phase="running"}')" 0

# A 2-node job that ends 0.
mkdir "$T/two"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="$ep" --rdzv_id=two "$TW" env "$T/two"
done
wait_exit "$AGENT_a" 60; [ "$RC" -eq 0 ] || { cat "$T/a.err"; fail "agent a exited $RC"; }
wait_exit "$AGENT_b" 60; [ "$RC" -eq 0 ] || { cat "$T/b.err"; fail "agent b exited $RC"; }

scrape m1
expect_eq "rounds after a 2-node job" "$(val m1 rdzvd_rounds_completed_total)" 1
expect_eq "joins" "$(val m1 rdzvd_joins_total)" 2
expect_eq "histogram count" "$(val m1 rdzvd_round_completion_seconds_count)" 1
expect_eq "+Inf bucket" \
  "$(val m1 'rdzvd_round_completion_seconds_bucket{le="+Inf"}')" 1
expect_eq "finished jobs (kept close_timeout)" \
  "$(val m1 'rdzvd_jobs{phase="finished"}')" 1
expect_eq "nodes after the job" "$(val m1 rdzvd_nodes)" 0
[ "$(val m1 rdzvd_connections_accepted_total)" -ge 2 ] ||
  fail "connections accepted: $(val m1 rdzvd_connections_accepted_total)"
[ "$(val m1 rdzvd_received_bytes_total)" -gt 0 ] || fail "no bytes in"
[ "$(val m1 rdzvd_sent_bytes_total)" -gt 0 ] || fail "no bytes out"

# A worker failure: one restart, two more rounds.
mkdir "$T/f"
for n in c d; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="$ep" --rdzv_id=fail1 --max_restarts=2 \
    "$TW" fail "$T/f" 1 5 1
done
wait_exit "$AGENT_c" 60; [ "$RC" -eq 0 ] || { cat "$T/c.err"; fail "agent c exited $RC"; }
wait_exit "$AGENT_d" 60; [ "$RC" -eq 0 ] || { cat "$T/d.err"; fail "agent d exited $RC"; }
scrape m2
expect_eq "restarts" "$(val m2 rdzvd_restarts_total)" 1
expect_eq "rounds" "$(val m2 rdzvd_rounds_completed_total)" 3
expect_eq "histogram count" "$(val m2 rdzvd_round_completion_seconds_count)" 3

# A node that joins with another configuration is refused (config_mismatch);
# a frame of length 0 is a frame error (and a bad_request refusal).
mkdir "$T/mm"
agent e --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=mm \
  "$TW" env "$T/mm"
for ((i = 0; i < 400; i++)); do
  "$RDZVD" --status "$ep" --json 2>/dev/null | grep -q '"mm"' && break
  sleep 0.05
done
agent f --nnodes=3 --rdzv_backend=c10d --rdzv_endpoint="$ep" --rdzv_id=mm \
  "$TW" env "$T/mm"
wait_exit "$AGENT_f" 60; [ "$RC" -ne 0 ] || fail "a mismatched node was admitted"
kill "$AGENT_e" 2>/dev/null; wait_exit "$AGENT_e" 60
$PY - "$RDZVD_PORT" <<'PY' || fail "the bad frame was not answered"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"\0\0\0\0")
data = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    data += d
assert b"bad_request" in data, data
PY
scrape m3
expect_eq "frame errors" "$(val m3 rdzvd_frame_errors_total)" 1
expect_eq "config_mismatch refusals" \
  "$(val m3 'rdzvd_refusals_total{reason="config_mismatch"}')" 1
[ "$(val m3 'rdzvd_refusals_total{reason="bad_request"}')" -ge 1 ] ||
  fail "bad_request refusals: $(val m3 'rdzvd_refusals_total{reason="bad_request"}')"

# Hostile HTTP: every exchange ends with an answer or a close, never a hang.
$PY - "$MPORT" <<'PY' || fail "hostile HTTP"
import socket, sys, time
port = int(sys.argv[1])

def conn():
    return socket.create_connection(("127.0.0.1", port), timeout=60)

def exchange(data):
    s = conn()
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except ConnectionResetError:
        pass
    s.close()
    return out

def status(resp):
    return resp.split(b"\r\n", 1)[0]

r = exchange(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
assert status(r) == b"HTTP/1.1 404 Not Found", r
assert b"Connection: close" in r, r
r = exchange(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
assert status(r) == b"HTTP/1.1 405 Method Not Allowed", r
r = exchange(b"HELLO\r\n\r\n")
assert status(r) == b"HTTP/1.1 400 Bad Request", r
r = exchange(b"GET /metrics SPDY/3\r\n\r\n")
assert status(r) == b"HTTP/1.1 400 Bad Request", r
# A request head of 1 MiB: 431 (or a reset once the daemon closed).
r = exchange(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20))
assert r == b"" or status(r) == b"HTTP/1.1 431 Request Header Fields Too Large", r[:200]
# HTTP/1.0 and a query string are fine.
r = exchange(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
assert status(r) == b"HTTP/1.1 200 OK", r[:200]
assert b"rdzvd_nodes" in r, r[:200]

# Every slot (16) and more held by idle clients: a scrape still gets its
# answer (the oldest idle one makes room), however often they come back.
for _ in range(3):
    idle = [conn() for _ in range(20)]
    r = exchange(b"GET /metrics HTTP/1.1\r\n\r\n")
    assert status(r) == b"HTTP/1.1 200 OK", r[:200]
    for s in idle:
        s.close()

# A slow client (half a request line, then nothing) and 40 idle ones:
# the daemon closes each, evicted or past its header timeout.
slow = conn()
slow.sendall(b"GET /met")
idle = [conn() for _ in range(40)]
deadline = time.monotonic() + 90     # the daemon's limit is 2 s
for s in [slow] + idle:
    s.settimeout(max(0.1, deadline - time.monotonic()))
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        sys.exit("a slow or idle scraper was never closed")
    s.close()
r = exchange(b"GET /metrics HTTP/1.1\r\n\r\n")
assert status(r) == b"HTTP/1.1 200 OK", r[:200]
PY
alive "$RDZVD_PID" || fail "rdzvd died under hostile HTTP"
scrape m4
"$RDZVD" --status "$ep" >/dev/null || fail "the rendezvous port stopped answering"
expect_eq "open connections" "$(val m4 rdzvd_connections_open)" 0

if command -v promtool >/dev/null; then
  curl -sf "$URL" >"$T/raw" || fail "curl $URL"
  promtool check metrics <"$T/raw" || fail "promtool check metrics"
else
  echo "note: promtool not installed; only the Python parser was used" >&2
fi

kill "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30
expect_eq "rdzvd exit status after SIGTERM" "$RC" 0
exit 0
