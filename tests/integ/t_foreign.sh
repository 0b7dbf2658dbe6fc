#!/bin/bash
# Note [foreign protocol]: pointed at an endpoint that is not an rdzvd (a
# torchrun TCPStore, an HTTP server), cdrun says what it found.
. "$(dirname "$0")/lib.sh"

# answers FILE: a loopback server that answers every connection with an
# HTTP error; its port goes to FILE.
python3 - "$T/http.port" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
    c.close()
PY
STARTED+=($!)
wait_files "$T/http.port" 1 30
"$CDRUN" --nnodes=1 --rdzv_backend=c10d --rdzv_id=f \
  --rdzv_endpoint="127.0.0.1:$(cat "$T/http.port")" --rdzv_conf=is_host=0 \
  "$TW" env "$T" 2>"$T/http.err"
expect_eq "HTTP endpoint: exit status" "$?" 1
expect_grep "the endpoint 127\.0\.0\.1:[0-9]+ does not speak the rdzvd protocol \(it answered [0-9]+ bytes that are not an rdzvd frame" \
  "$T/http.err"

# A real TCPStore from Debian's python3-torch.
py=
for p in python3 /usr/bin/python3; do
  "$p" -c 'import torch.distributed' 2>/dev/null && { py=$p; break; }
done
[ -n "$py" ] || skip "no python3 with torch (python3-torch) for a real TCPStore"
"$py" - "$T/store.port" <<'PY' &
import os, sys, time
import torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
open(sys.argv[1] + ".tmp", "w").write(str(s.port))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
PY
STARTED+=($!)
wait_files "$T/store.port" 1 60
"$CDRUN" --nnodes=1 --rdzv_backend=c10d --rdzv_id=f \
  --rdzv_endpoint="127.0.0.1:$(cat "$T/store.port")" --rdzv_conf=is_host=0 \
  "$TW" env "$T" 2>"$T/store.err"
expect_eq "TCPStore endpoint: exit status" "$?" 1
expect_grep "the endpoint 127\.0\.0\.1:[0-9]+ does not speak the rdzvd protocol \(it (reset|closed) the connection after our hello; is it a torch TCPStore" \
  "$T/store.err"
exit 0
