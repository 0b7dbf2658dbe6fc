#!/bin/bash
# libpg's store asks for the job token cdrun gives the workers
# (CDRUN_JOB_TOKEN): a stranger who reaches MASTER_PORT while a real job
# runs can neither read pg/host/0 nor write pg/exit/N, and what it sends
# does not make rank 0 grow; the job completes.  Then two agents (two
# "nodes" of an embedded rendezvous without a secret) give their workers
# the same token, the one the rendezvous issued with the round.
# integ-retry: seen once (CI under ASan, 2026-11-26): the two-agent part's workers wrote no token in 60 s; not reproduced in 65 runs (50 under load); the scenario now prints both agents' logs when it happens
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest

# The stranger: raw protocol (libpg/core/store_wire.h), no token.
cat >"$T/stranger.py" <<'PY'
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])

def connect():
    s = socket.create_connection((host, port), timeout=20)
    s.sendall(b"pgs\x02" + b"\0" * 32)
    return s

def recv_all(s):
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return out
            out += b
    except (ConnectionResetError, socket.timeout):
        return out

def frame(op, rid, body):
    return struct.pack("<IBI", 5 + len(body), op, rid) + body

def key(k):
    k = k.encode()
    return struct.pack("<I", len(k)) + k

# It asks for the token.
s = connect()
head = s.recv(37, socket.MSG_WAITALL)
assert head[:4] == b"pgs\x02" and head[4] == 1, head
s.close()
# A GET of pg/host/0 where the proof goes: refused, no value.
s = connect()
get = frame(2, 1, key("pg/host/0") + struct.pack("<I", 0))
s.sendall(get * 2)
r = recv_all(s)
assert r[:37][:5] == b"pgs\x02\x01" and r[37:38] == b"\x0a" and len(r) == 70, r
print("read pg/host/0: refused")
# A SET of pg/exit/1: refused.
s = connect()
s.sendall(frame(1, 1, key("pg/exit/1") + key("1")) * 2)
r = recv_all(s)
assert r[37:38] == b"\x0a" and len(r) == 70, r
print("write pg/exit/1: refused")
# Twelve 64 MiB SETs (the report's): the server reads 32 bytes of each.
taken = 0
for i in range(12):
    s = connect()
    big = frame(1, 1, key("hog/%d" % i) + struct.pack("<I", 64 << 20))
    try:
        s.sendall(big)
        chunk = b"\0" * (1 << 20)
        for _ in range(64):
            s.sendall(chunk)
            taken += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.close()
print("twelve 64 MiB SETs sent, %d MiB taken and dropped" %
      (taken >> 20))
# Another protocol version: told ours, closed.
s = socket.create_connection((host, port), timeout=20)
s.sendall(b"pgs\x01")
assert recv_all(s) == b"pgs\x02"
print("version 1 hello: refused")
PY

hwm() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }

# ---- one node: a random token, a stranger at the door ----
d=$T/h
mkdir "$d"
PG_TIMEOUT=60 bg_cdrun --standalone --nproc_per_node=2 --no_python \
  "$PGTEST" hold "$d"
wait_files "$d/master" 1 60
wait_files "$d/token.*" 2 60
for r in 0 1; do
  expect_eq "rank $r token length" "$(cat "$d/token.$r")" 64
done
read -r addr port <"$d/master"
pid0=$(cat "$d/pid.0")
before=$(hwm "$pid0")
python3 "$T/stranger.py" "$addr" "$port" >"$T/stranger.out" 2>&1 ||
  { cat "$T/stranger.out"; fail "the stranger got in"; }
cat "$T/stranger.out" >&2
after=$(hwm "$pid0")
echo "rank 0 VmHWM: ${before} kB before the stranger, ${after} kB after" >&2
[ $((after - before)) -lt 16384 ] ||
  fail "rank 0 grew from ${before} kB to ${after} kB"
touch "$d/release"
wait_exit "$BG" 60
[ "$RC" -eq 0 ] || { cat "$T/err"; fail "the job exited $RC"; }
grep -q "CDRUN_JOB_TOKEN is not set" "$T/err" &&
  fail "a worker ran without a token"

# ---- two nodes, no rendezvous secret: the rendezvous issues the round's
# token (Note [job token]): the same on both, and nobody can compute it ----
d=$T/m
mkdir "$d"
port=$(free_port)
for n in a b; do
  PG_TIMEOUT=60 agent "$n" --nnodes=2 --nproc_per_node=1 \
    --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=auth \
    --no_python "$PGTEST" hold "$d"
done
(wait_files "$d/token.*" 2 60) ||
  { cat "$T/a.err" "$T/b.err"; fail "the workers wrote no token"; }
touch "$d/release"
for n in a b; do
  v=AGENT_$n
  wait_exit "${!v}" 60
  [ "$RC" -eq 0 ] || { cat "$T/a.err" "$T/b.err"; fail "agent $n exited $RC"; }
  grep -q "no rendezvous secret: the workers' CDRUN_JOB_TOKEN" "$T/$n.err" &&
    fail "agent $n says its workers' token can be computed"
done
# Both ranks passed rank 0's store handshake and all-reduced: one token.
exit 0
