#!/bin/bash
# Note [console queue] (launcher/conqueue.h): a console reader that stops
# reading never stops the agent.  Tee'd lines queue up to a bound, past it
# they are dropped and counted; the log files keep them all; SIGTERM ends
# the job as usual.  Before, the agent sat in write(2) to the stalled
# console, and the SIGTERM waited for the reader (600 s here).  The same
# for the head of --hosts (a stand-in ssh runs the host's cdrun here),
# whose lines now go through output.h's line assembler and the queue.
. "$(dirname "$0")/lib.sh"

# A worker that writes 8 MB of 100-byte lines (more than the queue holds),
# says so, and waits.
GEN='head -c 8000000 /dev/zero | tr "\0" x | fold -w 99; : >"$0/written"; exec sleep 600'

# ---- a reader that never reads: SIGTERM still ends the job ---------------
mkfifo "$T/fifo"
sleep 600 <"$T/fifo" &
STARTED+=("$!")
"$CDRUN" --standalone --nproc_per_node=1 --tee 3 --no_python \
  /bin/sh -c "$GEN" "$T" >"$T/fifo" 2>"$T/err" &
BG=$!
STARTED+=("$BG")
wait_files "$T/written" 1 60
kill -TERM "$BG"
wait_exit "$BG" 30
expect_eq "exit status" "$RC" 143
expect_grep "lines of the workers' stdout did not reach the console \(it did not keep up; the workers' log files have them all" "$T/err"
log=$(find "$T/tmpdir" -name stdout.log | head -1)
[ -n "$log" ] || fail "no stdout.log kept"
# The log file lost nothing.
expect_eq "log file lines" "$(grep -c '^x' "$log")" 80809
rm -f "$T/written"

# ---- a reader that pauses, then reads: the console says what it lost ------
python3 - "$T/fifo2" "$T/go" "$T/console" <<'PY' &
import os, sys, time
fifo, go, out = sys.argv[1:]
os.mkfifo(fifo)
fd = os.open(fifo, os.O_RDONLY)
while not os.path.exists(go):
    time.sleep(0.05)
with open(out, "wb") as f:
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        f.write(b)
        f.flush()
PY
STARTED+=("$!")
wait_files "$T/fifo2" 1 30
"$CDRUN" --standalone --nproc_per_node=1 --tee 3 --no_python \
  /bin/sh -c "$GEN" "$T" >"$T/fifo2" 2>"$T/err2" &
BG=$!
STARTED+=("$BG")
wait_files "$T/written" 1 60
: >"$T/go"
wait_grep "cdrun: the console did not keep up: [0-9]+ lines dropped" \
  "$T/console" 60
kill -TERM "$BG"
wait_exit "$BG" 30
expect_eq "exit status" "$RC" 143
rm -f "$T/written"

# ---- the head of --hosts, a reader that never reads -----------------------
cat >"$T/fakessh" <<'SH'
#!/bin/bash
# A stand-in for ssh: the last argument is the host's command; run it here.
for a; do cmd=$a; done
exec /bin/sh -c "$cmd"
SH
chmod +x "$T/fakessh"
mkfifo "$T/fifo3"
sleep 600 <"$T/fifo3" &
STARTED+=("$!")
CDRUN_SSH=$T/fakessh CDRUN_SSH_CDRUN=$CDRUN "$CDRUN" --hosts=localhost \
  --nproc_per_node=1 --no_python /bin/sh -c "$GEN" "$T" >"$T/fifo3" \
  2>"$T/err3" &
BG=$!
STARTED+=("$BG")
wait_files "$T/written" 1 60
kill -TERM "$BG"
wait_exit "$BG" 30
expect_eq "head's exit status" "$RC" 143
expect_grep "lines of the hosts' stdout did not reach the console \(it did not keep up\)" "$T/err3"
exit 0
