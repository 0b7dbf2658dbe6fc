#!/usr/bin/env python3
"""rdzv_peer.py -- a rendezvous peer that says what a test tells it to.

    rdzv_peer.py HOST PORT [--secret-file PATH] [--wait SECS] BODY...

Connects to an rdzvd, passes the shared-secret handshake when given a
secret (proto/PROTOCOL.md section 4.3), sends each BODY (a JSON object;
"v":2 is added) as one frame, then prints every frame it gets back, one
JSON body a line, until the server closes the connection or nothing has
come for --wait seconds (default 5).  Exit 0 unless the connection or the
handshake failed.  The tests use it as the stranger: a client that holds
the secret but was never a node of the job.
"""
import hashlib
import hmac
import json
import os
import socket
import struct
import sys


def frame(obj):
    body = json.dumps(dict({"v": 2}, **obj), separators=(",", ":")).encode()
    return struct.pack(">I", len(body)) + body


def read_frame(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    if n == 0 or n > (1 << 20):
        raise ValueError("bad frame length %d" % n)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


def handshake(sock, key):
    nc = os.urandom(32)
    sock.sendall(frame({"op": "hello", "nonce": nc.hex()}))
    m = read_frame(sock)
    if not m or m.get("op") != "challenge":
        sys.exit("rdzv_peer: handshake: got %r" % (m,))
    ns = bytes.fromhex(m["nonce"])
    mac = hmac.new(key, b"cdrun-rdzv-2 client" + nc + ns, hashlib.sha256)
    sock.sendall(frame({"op": "auth", "mac": mac.hexdigest()}))
    m = read_frame(sock)
    if not m or m.get("op") != "auth_ok":
        sys.exit("rdzv_peer: handshake: got %r" % (m,))


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    host, port, rest = argv[1], int(argv[2]), argv[3:]
    secret, wait, bodies = None, 5.0, []
    i = 0
    while i < len(rest):
        if rest[i] == "--secret-file":
            with open(rest[i + 1], "rb") as f:
                secret = f.read()
            if secret.endswith(b"\r\n"):
                secret = secret[:-2]
            elif secret.endswith(b"\n"):
                secret = secret[:-1]
            i += 2
        elif rest[i] == "--wait":
            wait = float(rest[i + 1])
            i += 2
        else:
            bodies.append(json.loads(rest[i]))
            i += 1
    sock = socket.create_connection((host, port), timeout=wait)
    if secret is not None:
        handshake(sock, secret)
    for b in bodies:
        sock.sendall(frame(b))
    try:
        while True:
            m = read_frame(sock)
            if m is None:
                print("closed")
                break
            print(json.dumps(m, separators=(",", ":")))
            sys.stdout.flush()
    except socket.timeout:
        print("silent")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
