#!/bin/bash
# Shared-secret authentication (rdzvd --secret-file, --rdzv-conf=
# secret_file): the right secret works, a wrong or missing one is refused
# at once with "rendezvous refused: authentication failed" and the daemon
# logs the peer; the embedded host and rdzvd --status use it too.
. "$(dirname "$0")/lib.sh"

REFUSED='rendezvous refused: authentication failed'
umask 077
openssl rand -hex 32 >"$T/good" 2>/dev/null || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/good"
printf 'a-wrong-secret-of-some-length\n' >"$T/bad"
chmod 600 "$T/good" "$T/bad"

# A daemon with a secret.
: >"$T/rdzvd.log"
"$RDZVD" --host 127.0.0.1 --port 0 --secret-file "$T/good" 2>>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
for ((i = 0; i < 100; i++)); do
  RDZVD_PORT=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/rdzvd.log")
  [ -n "$RDZVD_PORT" ] && break
  sleep 0.05
done
[ -n "$RDZVD_PORT" ] || fail "rdzvd did not start: $(cat "$T/rdzvd.log")"
ep=127.0.0.1:$RDZVD_PORT
common=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d
        --rdzv_endpoint="$ep")

# 1. The right secret, once as --rdzv-conf, once from the environment.
mkdir "$T/ok"
agent a "${common[@]}" --rdzv_id=ok --rdzv-conf=secret_file="$T/good" \
  "$TW" env "$T/ok"
CDRUN_RDZV_SECRET_FILE=$T/good agent b "${common[@]}" --rdzv_id=ok \
  "$TW" env "$T/ok"
wait_exit "$AGENT_a" 60; [ "$RC" -eq 0 ] || { cat "$T/a.err"; fail "agent a exited $RC"; }
wait_exit "$AGENT_b" 60; [ "$RC" -eq 0 ] || { cat "$T/b.err"; fail "agent b exited $RC"; }
check_world "$T/ok" env 2

# 2. A wrong secret and 3. none: refused at once, not after the join
# timeout (an hour here), and the daemon names the peer.
conf_long=join_timeout=3600
agent wrong "${common[@]}" --rdzv_id=w --rdzv-conf="$conf_long,secret_file=$T/bad" \
  "$TW" env "$T/ok"
wait_exit "$AGENT_wrong" 30
[ "$RC" -ne 0 ] || fail "an agent with a wrong secret exited 0"
expect_grep "$REFUSED" "$T/wrong.err"
expect_grep "authentication failed from 127\.0\.0\.1: wrong shared secret" "$T/rdzvd.log"
agent none "${common[@]}" --rdzv_id=w --rdzv-conf="$conf_long" "$TW" env "$T/ok"
wait_exit "$AGENT_none" 30
[ "$RC" -ne 0 ] || fail "an agent without a secret exited 0"
expect_grep "$REFUSED" "$T/none.err"
expect_grep "requires a shared secret" "$T/none.err"
expect_grep "authentication failed from 127\.0\.0\.1: no shared secret" "$T/rdzvd.log"
# Neither stranger created a job.
grep -q "job w:" "$T/rdzvd.log" && fail "a refused agent reached the state machine"

# A secret file others can read is refused, as ssh does.
chmod 644 "$T/bad"
"$CDRUN" "${common[@]}" --rdzv_id=p --rdzv-conf=secret_file="$T/bad" \
  --no_python /bin/true >"$T/perm.out" 2>"$T/perm.err" && fail "a 0644 secret file was accepted"
expect_grep "permissions 0644 are too open" "$T/perm.err"
"$RDZVD" --port 0 --secret-file "$T/bad" 2>"$T/perm2.err" && fail "rdzvd accepted a 0644 secret file"
expect_grep "too open" "$T/perm2.err"
chmod 600 "$T/bad"

# rdzvd --status: with the secret it answers; without, or wrong, refused.
"$RDZVD" --status "$ep" --secret-file "$T/good" >"$T/status" 2>"$T/status.err" ||
  { cat "$T/status.err"; fail "rdzvd --status with the secret failed"; }
expect_grep '^job ok: ' "$T/status"
RDZVD_SECRET_FILE=$T/good "$RDZVD" --status "$ep" --json >"$T/status.json" ||
  fail "rdzvd --status with RDZVD_SECRET_FILE failed"
"$RDZVD" --status "$ep" >"$T/s2.out" 2>"$T/s2.err" && fail "--status without the secret succeeded"
expect_grep "$REFUSED" "$T/s2.err"
"$RDZVD" --status "$ep" --secret-file "$T/bad" >"$T/s3.out" 2>"$T/s3.err" &&
  fail "--status with a wrong secret succeeded"
expect_grep "$REFUSED" "$T/s3.err"
kill -0 "$RDZVD_PID" || fail "rdzvd died"

# A version 1 peer (no handshake) gets an error naming both versions.
python3 - "$RDZVD_PORT" >"$T/v1.out" <<'PY' || fail "v1 probe failed"
import json, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
body = b'{"v":1,"op":"status"}'
s.sendall(struct.pack(">I", len(body)) + body)
n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
print(json.loads(s.recv(n, socket.MSG_WAITALL))["message"])
PY
expect_grep "unsupported protocol version 1 \(this side speaks version 2\)" "$T/v1.out"

# Before the handshake a frame may be tiny: a stranger announcing 1 MiB is
# refused on the header alone, without the server waiting for the body.
python3 - "$RDZVD_PORT" >"$T/big.out" <<'PY' || fail "pre-auth size probe failed"
import json, socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(struct.pack(">I", 1 << 20) + b'{"v":2,')
n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
m = json.loads(s.recv(n, socket.MSG_WAITALL))
print(m["code"], m["message"])
print("closed" if s.recv(1) == b"" else "open")
PY
expect_grep "^auth this server requires a shared secret" "$T/big.out"
expect_grep "^closed" "$T/big.out"
expect_grep "no shared secret: a frame of 1048576 bytes before authenticating" "$T/rdzvd.log"

# Frames pipelined behind hello (§4.3), in the same write: the frame is
# answered at once (the challenge, then error auth and the close) without
# the client sending another byte.  A join is not the next handshake
# message; an auth cannot hold a proof for a challenge not yet seen.
python3 - "$RDZVD_PORT" >"$T/pipe.out" <<'PY' || fail "pipelined hello probe failed"
import json, os, socket, struct, sys

def frame(o):
    b = json.dumps(o, separators=(",", ":")).encode()
    return struct.pack(">I", len(b)) + b

def recv_msg(s):
    h = s.recv(4, socket.MSG_WAITALL)
    if len(h) < 4:
        return None
    return json.loads(s.recv(struct.unpack(">I", h)[0], socket.MSG_WAITALL))

hello = frame({"v": 2, "op": "hello", "nonce": os.urandom(32).hex()})
for name, second in (("join", {"v": 2, "op": "join", "id": "pipelined",
                               "nproc": 1, "master_port": 29500}),
                     ("auth", {"v": 2, "op": "auth", "mac": "ab" * 32})):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
    s.sendall(hello + frame(second))
    got = []
    try:
        while (m := recv_msg(s)) is not None:
            got.append(m["op"] if m["op"] != "error" else "error " + m["code"])
    except socket.timeout:
        got.append("NO ANSWER")
    print(name, " ".join(got))
PY
expect_grep "^join challenge error auth$" "$T/pipe.out"
expect_grep "^auth challenge error auth$" "$T/pipe.out"
expect_grep "authentication failed from 127\.0\.0\.1: handshake out of order \(expected auth\)" "$T/rdzvd.log"
expect_grep "authentication failed from 127\.0\.0\.1: auth sent before the challenge \(pipelined behind hello\)" "$T/rdzvd.log"
grep -q "job pipelined:" "$T/rdzvd.log" && fail "a pipelined join reached the state machine"

# A client with a secret and a server without: refused, clearly, both ends.
start_rdzvd
agent extra --nnodes=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$RDZVD_PORT" \
  --rdzv_id=x --rdzv-conf=secret_file="$T/good" --no_python /bin/true
wait_exit "$AGENT_extra" 30
[ "$RC" -ne 0 ] || fail "an agent with a secret joined a server without one"
expect_grep "$REFUSED.*has no shared secret" "$T/extra.err"
expect_grep "offers a shared secret, but this server has none" "$T/rdzvd.log"

# The embedded host demands the secret too.
port=$(free_port)
mkdir "$T/e"
agent host --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=emb \
  --rdzv-conf=secret_file="$T/good" "$TW" env "$T/e"
for ((i = 0; i < 200; i++)); do
  grep -q 'hosting the rendezvous' "$T/host.err" && break
  sleep 0.05
done
expect_grep 'hosting the rendezvous' "$T/host.err"
agent stranger --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=emb --rdzv-conf=is_host=0 \
  "$TW" env "$T/e"
wait_exit "$AGENT_stranger" 30
[ "$RC" -ne 0 ] || fail "a stranger joined the embedded host"
expect_grep "$REFUSED" "$T/stranger.err"
agent friend --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=emb \
  --rdzv-conf="is_host=0,secret_file=$T/good" "$TW" env "$T/e"
wait_exit "$AGENT_friend" 60
[ "$RC" -eq 0 ] || { cat "$T/friend.err" "$T/host.err"; fail "friend exited $RC"; }
wait_exit "$AGENT_host" 30
[ "$RC" -eq 0 ] || { cat "$T/host.err"; fail "host exited $RC"; }
check_world "$T/e" env 2
exit 0
