#!/bin/bash
# rdzvd as a service: READY=1 and STOPPING=1 through a NOTIFY_SOCKET (a
# path, then an abstract name), READY only once the port accepts;
# --log-file, and SIGHUP reopening it after a rename (logrotate); the unit
# file passes systemd-analyze verify.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3

# notify_receiver NAME OUT LOG: a datagram socket at NAME ('@...' is
# abstract).  Each datagram goes to OUT; on READY=1 it also connects to
# the port in LOG's first line and writes 'connect ok' (or the error).
# Exits after STOPPING=1.
notify_receiver() {
  $PY - "$@" <<'PY' &
import os, re, socket, sys
name, out, log = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0" + name[1:] if name.startswith("@") else name)
open(out + ".bound", "w").close()
s.settimeout(150)
with open(out, "a") as o:
    while True:
        msg = s.recv(4096).decode()
        o.write(msg + "\n--\n")
        o.flush()
        if "READY=1" in msg.split("\n"):
            port = re.search(r"listening on \S+:(\d+) ", open(log).read()).group(1)
            try:
                socket.create_connection(("127.0.0.1", int(port)), 10).close()
                o.write("connect ok\n")
            except OSError as e:
                o.write("connect failed: %s\n" % e)
            o.flush()
        if "STOPPING=1" in msg.split("\n"):
            break
PY
  NOTIFY_PID=$!
  STARTED+=("$NOTIFY_PID")
  wait_files "$2.bound" 1 30
}

# start_daemon NOTIFY_SOCKET ARGS...: rdzvd on a free loopback port.
start_daemon() {
  local sock=$1 i
  shift
  : >"$T/stderr"
  NOTIFY_SOCKET=$sock "$RDZVD" --host 127.0.0.1 --port 0 "$@" \
    2>>"$T/stderr" &
  RDZVD_PID=$!
  STARTED+=("$RDZVD_PID")
  for ((i = 0; i < 200; i++)); do
    RDZVD_PORT=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' \
                   "$T/stderr")
    [ -n "$RDZVD_PORT" ] && return 0
    sleep 0.05
  done
  cat "$T/stderr" >&2
  fail "rdzvd did not start"
}

# wait_grep PATTERN FILE SECONDS
wait_grep() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    grep -Eq -- "$1" "$2" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "--- $2:" >&2
  cat "$2" >&2
  fail "no line matching '$1' in $2 after $3 s"
}

# one_job ID: a 1-node job through the daemon, which must end 0.
one_job() {
  mkdir -p "$T/$1"
  agent "$1" --nnodes=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$RDZVD_PORT" --rdzv_id="$1" "$TW" env "$T/$1"
  local v=AGENT_$1
  wait_exit "${!v}" 60
  [ "$RC" -eq 0 ] || { cat "$T/$1.err"; fail "job $1 exited $RC"; }
}

# 1. A path socket, and --log-file.
notify_receiver "$T/notify.sock" "$T/notify1" "$T/stderr"
start_daemon "$T/notify.sock" --log-file="$T/rdzvd.log"
wait_grep '^READY=1$' "$T/notify1" 30
wait_grep '^connect ok$' "$T/notify1" 30
expect_grep '^STATUS=listening on port [0-9]+$' "$T/notify1"
grep -q STOPPING "$T/notify1" && fail "STOPPING before SIGTERM"
# The first line goes to both; job lines to the log file only.
expect_grep '^rdzvd: listening on ' "$T/rdzvd.log"
one_job first
wait_grep 'job first: round 0 complete' "$T/rdzvd.log" 30
grep -q 'job first' "$T/stderr" && fail "job lines went to stderr too"

# logrotate: rename, SIGHUP, the daemon writes a new file.
mv "$T/rdzvd.log" "$T/rdzvd.log.1"
kill -HUP "$RDZVD_PID"
wait_files "$T/rdzvd.log" 1 30
wait_grep "SIGHUP: reopened $T/rdzvd.log" "$T/rdzvd.log" 30
one_job second
wait_grep 'job second: round 0 complete' "$T/rdzvd.log" 30
grep -q 'job second' "$T/rdzvd.log.1" && fail "the renamed file got new lines"
alive "$RDZVD_PID" || fail "rdzvd died of SIGHUP"

kill -TERM "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30
expect_eq "rdzvd exit status after SIGTERM" "$RC" 0
wait_exit "$NOTIFY_PID" 30
expect_eq "receiver" "$RC" 0
expect_grep '^STOPPING=1$' "$T/notify1"
expect_grep 'SIGTERM: shutting down' "$T/rdzvd.log"

# 2. An abstract socket (what systemd uses when /run is unavailable), and
# SIGHUP without --log-file: logged, harmless.
abstract="@cdrun-test-notify-$$-$RANDOM"
notify_receiver "$abstract" "$T/notify2" "$T/stderr"
start_daemon "$abstract"
wait_grep '^READY=1$' "$T/notify2" 30
wait_grep '^connect ok$' "$T/notify2" 30
kill -HUP "$RDZVD_PID"
wait_grep 'SIGHUP: no --log-file to reopen' "$T/stderr" 30
kill -TERM "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30
expect_eq "rdzvd exit status after SIGTERM" "$RC" 0
wait_exit "$NOTIFY_PID" 30
expect_grep '^STOPPING=1$' "$T/notify2"

# 3. A NOTIFY_SOCKET nobody listens on: a warning, and rdzvd still runs.
start_daemon "$T/nobody.sock"
wait_grep 'warning: cannot notify systemd' "$T/stderr" 30
one_job third
kill -TERM "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30
expect_eq "rdzvd exit status" "$RC" 0

# 4. An unwritable --log-file is refused up front.
"$RDZVD" --port 0 --log-file="$T/no/such/dir/log" 2>"$T/err.log" &&
  fail "rdzvd started with an unwritable log file"
expect_grep 'cannot open .*no/such/dir/log' "$T/err.log"

# 5. The unit file: systemd parses every line of it.
UNIT=$(cd "$(dirname "$0")/../.." && pwd)/scripts/rdzvd.service
for key in Type=notify DynamicUser=yes ProtectSystem=strict ProtectHome=yes \
           NoNewPrivileges=yes PrivateTmp=yes 'ExecReload=/bin/kill -HUP'; do
  grep -q "^$key" "$UNIT" || fail "rdzvd.service has no $key"
done
if command -v systemd-analyze >/dev/null; then
  sed "s|/usr/local/bin/rdzvd|$RDZVD|" "$UNIT" >"$T/rdzvd.service"
  systemd-analyze verify --man=no "$T/rdzvd.service" >"$T/verify" 2>&1 ||
    { cat "$T/verify"; fail "systemd-analyze verify failed"; }
  if grep 'rdzvd.service' "$T/verify"; then
    fail "systemd-analyze has remarks on rdzvd.service"
  fi
else
  echo "note: no systemd-analyze; the unit file was not verified" >&2
fi
exit 0
