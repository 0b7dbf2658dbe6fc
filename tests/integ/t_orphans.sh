#!/bin/bash
# SIGKILL of the agent leaves no worker and no grandchild alive, and no
# temporary log directory.
. "$(dirname "$0")/lib.sh"

mkdir "$T/a" "$T/tmp"
TMPDIR=$T/tmp bg_cdrun --standalone --nproc_per_node=3 "$TW" sleep "$T/a" 60
wait_files "$T/a/gpid.*" 3 10
wait_files "$T/a/pid.*" 3 10
pids=$(cat "$T"/a/pid.* "$T"/a/gpid.*)
compgen -G "$T/tmp/cdrun_*/*/attempt_0" >/dev/null ||
  fail "no log directory under TMPDIR: $(find "$T/tmp" | head -5)"
for p in $pids; do alive "$p" || fail "process $p not running before the kill"; done
kill -KILL "$BG"
wait "$BG" 2>/dev/null
for ((i = 0; i < 100; i++)); do
  left=""
  for p in $pids; do alive "$p" && left="$left $p"; done
  [ -z "$left" ] && break
  sleep 0.1
done
[ -z "$left" ] || fail "processes left behind after SIGKILL of the agent:$left"
# The guardian removes $TMPDIR/cdrun_*/<run_id>_*/attempt_0/ once the
# workers are dead.
for ((i = 0; i < 100; i++)); do
  [ -z "$(ls -A "$T/tmp")" ] && break
  sleep 0.1
done
[ -z "$(ls -A "$T/tmp")" ] ||
  fail "SIGKILL of the agent left its log directory: $(find "$T/tmp" | head -5)"

# A normal exit also leaves no grandchild behind: the grandchild would
# sleep 600 s, so only cdrun can have ended it.
mkdir "$T/b"
"$CDRUN" --nproc_per_node=2 "$TW" sleep "$T/b" 0.2 600 || fail "short run"
for p in $(cat "$T"/b/gpid.*); do
  alive "$p" && fail "grandchild $p outlived a finished job"
done

# A job that ends well leaves no temporary log directory once cdrun has
# returned (Note [overlapped exit]: the guardian removes it, the agent
# waits for the guardian).
mkdir "$T/tmp2"
TMPDIR=$T/tmp2 "$CDRUN" --standalone --nproc_per_node=4 --no_python /bin/true ||
  fail "cdrun /bin/true failed"
[ -z "$(ls -A "$T/tmp2")" ] ||
  fail "a finished job left its temporary log directory: $(find "$T/tmp2" | head -5)"
exit 0
