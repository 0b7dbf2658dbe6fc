#!/usr/bin/env python3
"""flooder.py -- a stranger with TCP reach and no token: one thread per
listener opens connections and sends nothing, keeps up to --hold of them
open, and opens a new one whenever the server closes one (or, at --hold,
after closing its oldest), so that each listener's backlog always holds
fresh strangers.  Used by t_pg_p2p_flood.sh and scripts/bench/abuse.

  flooder.py [--hold N] [--ready FILE] [--min N] [--bind A,B,...]
             HOST:PORT...

--ready FILE is written once every listener has taken --min connections
(the kernel completed them: in its backlog or accepted).  Runs until
killed; prints "flooder: HOST:PORT opened=N closed_by_server=M" for each
listener on SIGTERM.  --bind gives the source addresses (each connection
takes the next in turn: several sources on one host, 127.0.0.2, ...);
default: the kernel's choice.  A refused connect waits 20 ms before the
next (the listener is not up yet).
"""
import time
import argparse
import resource
import select
import signal
import socket
import sys
import threading

ap = argparse.ArgumentParser()
ap.add_argument("--hold", type=int, default=300)
ap.add_argument("--min", type=int, default=200)
ap.add_argument("--ready")
ap.add_argument("--bind", default="")
ap.add_argument("targets", nargs="+")
args = ap.parse_args()

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

sources = [a for a in args.bind.split(",") if a]
stop = threading.Event()
stats = {}
ready_lock = threading.Lock()
ready = set()


def flood(k, target):
    host, port = target.rsplit(":", 1)
    port = int(port)
    socks = []
    poller = select.poll()
    st = stats[k] = {"target": target, "opened": 0, "closed": 0}
    n = 0
    while not stop.is_set():
        src = (sources[n % len(sources)], 0) if sources else None
        n += 1
        try:
            s = socket.create_connection((host, port), timeout=0.5,
                                         source_address=src)
            socks.append(s)
            poller.register(s.fileno(), select.POLLIN)
            st["opened"] += 1
        except ConnectionRefusedError:
            time.sleep(0.02)
        except OSError:
            pass
        if st["opened"] >= args.min and k not in ready:
            with ready_lock:
                ready.add(k)
                if len(ready) == len(args.targets) and args.ready:
                    open(args.ready, "w").write("ready\n")
        # Drop what the server closed; at the hold, close the oldest.
        gone = {fd for fd, _ in poller.poll(0)}
        if gone or len(socks) >= args.hold:
            keep = []
            for s in socks:
                if s.fileno() in gone:
                    st["closed"] += 1
                    poller.unregister(s.fileno())
                    s.close()
                else:
                    keep.append(s)
            socks = keep
            if len(socks) >= args.hold:
                poller.unregister(socks[0].fileno())
                socks.pop(0).close()
    for s in socks:
        s.close()


def on_term(*_):
    stop.set()


signal.signal(signal.SIGTERM, on_term)
threads = [threading.Thread(target=flood, args=(k, t), daemon=True)
           for k, t in enumerate(args.targets)]
for t in threads:
    t.start()
while not stop.is_set():
    stop.wait(0.2)
for t in threads:
    t.join(2)
for k, st in sorted(stats.items()):
    print("flooder: %s opened=%d closed_by_server=%d" %
          (st["target"], st["opened"], st["closed"]))
sys.stdout.flush()
