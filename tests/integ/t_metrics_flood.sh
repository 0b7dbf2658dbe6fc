#!/bin/bash
# rdzvd --metrics under a connect flood (issue 32, item 7): a stranger
# opens idle connections to the metrics port as fast as it can (four
# threads of tests/integ/flooder.py, each holding up to 200 and reopening
# what is closed) while a scraper asks for /metrics 100 times, one after
# the other.  Every scrape must be answered: a just-accepted scrape, whose
# request is already in the kernel, is not idle (Note [idle eviction]).
. "$(dirname "$0")/lib.sh"

FLOODER=$(dirname "$0")/flooder.py
: >"$T/rdzvd.log"
"$RDZVD" --host 127.0.0.1 --port 0 --metrics 127.0.0.1:0 \
  2>>"$T/rdzvd.log" &
STARTED+=($!)
for ((i = 0; i < 200; i++)); do
  MPORT=$(sed -n 's|^rdzvd: metrics on http://[^ ]*:\([0-9]*\)/metrics$|\1|p' \
            "$T/rdzvd.log")
  [ -n "$MPORT" ] && break
  sleep 0.05
done
[ -n "${MPORT:-}" ] || { cat "$T/rdzvd.log" >&2; fail "rdzvd --metrics did not start"; }

python3 "$FLOODER" --hold 200 --min 300 --ready "$T/flood" \
  127.0.0.1:$MPORT 127.0.0.1:$MPORT 127.0.0.1:$MPORT 127.0.0.1:$MPORT \
  >"$T/flood.out" 2>&1 &
FL=$!
STARTED+=($FL)
wait_files "$T/flood" 1 60

python3 - "$MPORT" >"$T/scrapes" 2>&1 <<'PY'
import socket, sys
port = int(sys.argv[1])
ok = bad = 0
for i in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
        s.close()
        if data.startswith(b"HTTP/1.1 200") and b"rdzvd_jobs" in data:
            ok += 1
        else:
            bad += 1
            print("scrape %d: %r" % (i, data[:80]))
    except OSError as e:
        bad += 1
        print("scrape %d: %s" % (i, e))
print("scrapes ok=%d failed=%d" % (ok, bad))
PY
kill -TERM "$FL" 2>/dev/null
wait "$FL" 2>/dev/null
cat "$T/flood.out"
tail -1 "$T/scrapes"
expect_grep "^scrapes ok=100 failed=0$" "$T/scrapes"
exit 0
