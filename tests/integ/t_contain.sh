#!/bin/bash
# Note [containment]: descendants that leave their worker's process group
# (setsid, a double-forked daemon) die with the group: at a normal end, on
# a stop by signal, and -- with a cgroup -- on a SIGKILL of cdrun.  Run with
# the cgroup (where the system delegates one) and with the subreaper alone.
. "$(dirname "$0")/lib.sh"

# all_dead DIR: every gpid.* in DIR names a process that is gone (by now:
# cdrun reaps what it kills before it exits).
all_dead() {
  local f p
  for f in "$1"/gpid.*; do
    p=$(cat "$f")
    alive "$p" && fail "$2: descendant $p ($f) survived"
  done
  return 0
}

for cg in 1 0; do
  for mode in setsid daemon; do
    d=$T/$mode.$cg
    mkdir "$d"
    CDRUN_CGROUP=$cg "$CDRUN" --standalone --nproc_per_node=2 "$TW" "$mode" \
      "$d" 0.2 2>"$d.err" || { cat "$d.err"; fail "$mode: cdrun failed"; }
    [ "$(compgen -G "$d/gpid.*" | wc -l)" -eq 2 ] || fail "$mode: no gpid files"
    all_dead "$d" "$mode (cgroup=$cg), normal end"

    d=$T/$mode.stop.$cg
    mkdir "$d"
    CDRUN_CGROUP=$cg bg_cdrun --standalone --nproc_per_node=2 "$TW" "$mode" \
      "$d" 60
    wait_files "$d/gpid.*" 2 30
    wait_files "$d/pid.*" 2 30
    kill -TERM "$BG"
    wait_exit "$BG" 60
    expect_eq "$mode (cgroup=$cg) stopped by SIGTERM: exit status" "$RC" 143
    all_dead "$d" "$mode (cgroup=$cg), stop by SIGTERM"
  done
done

# SIGKILL of cdrun: the guardian kills the cgroup, or (CDRUN_CGROUP=0)
# every process carrying this cdrun's CDRUN_CONTAIN token.
for cg in 1 0; do
  d=$T/kill.$cg
  mkdir "$d"
  CDRUN_CGROUP=$cg bg_cdrun --standalone --nproc_per_node=2 "$TW" daemon \
    "$d" 60
  wait_files "$d/gpid.*" 2 30
  wait_files "$d/pid.*" 2 30
  g=$(cat "$d/gpid.0")
  if [ "$cg" = 1 ] && ! grep -q '/cdrun-[0-9]*$' "/proc/$g/cgroup"; then
    echo "note: no delegated cgroup v2 here; the token covers it" >&2
  fi
  kill -KILL "$BG"
  wait "$BG" 2>/dev/null
  pids=$(cat "$d"/gpid.* "$d"/pid.*)
  for ((i = 0; i < 200; i++)); do
    left=""
    for p in $pids; do alive "$p" && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.05
  done
  [ -z "$left" ] || fail "left behind after SIGKILL of cdrun (cgroup=$cg):$left"
done

# Note [cgroup removal]: a worker may make a cgroup of its own below
# cdrun's (a cdrun run by a worker does): after a SIGKILL of cdrun the
# guardian kills what is in both and removes both.  It used to try rmdir
# for 2 s and give up: the cgroup below kept it busy, and cdrun-<pid>
# stayed behind, empty.  Needs a delegated cgroup v2 (skipped otherwise).
d=$T/nested
mkdir "$d"
bg_cdrun --standalone --nproc_per_node=1 "$TW" sleep "$d" 60
wait_files "$d/pid.*" 1 30
w=$(cat "$d/pid.0")
rel=$(sed -n 's/^0:://p' "/proc/$w/cgroup")
# The cgroup2 mount (fields after " - ": type, source), when it shows the
# whole hierarchy (root "/").
mnt=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") {
               if ($(i + 1) == "cgroup2" && $4 == "/") print $5; break } }' \
      /proc/self/mountinfo | head -n 1)
cgdir=$mnt$rel
if [[ $rel == */cdrun-"$BG" && -n $mnt && -d $cgdir ]] &&
    mkdir "$cgdir/sub" 2>/dev/null; then
  sleep 600 &
  s=$!
  STARTED+=("$s")
  echo "$s" >"$cgdir/sub/cgroup.procs" ||
    fail "cannot move a process into $cgdir/sub"
  kill -KILL "$BG"
  wait "$BG" 2>/dev/null
  for ((i = 0; i < 600; i++)); do
    [ -d "$cgdir" ] || alive "$s" || break
    sleep 0.05
  done
  alive "$s" && fail "a process in a cgroup below cdrun's survived its SIGKILL"
  [ -d "$cgdir" ] && fail "SIGKILL of cdrun left its cgroup $cgdir behind" \
    "(below it: $(ls -d "$cgdir"/*/ 2>/dev/null | tr '\n' ' '))"
  # Note [stale cgroups]: a cdrun SIGKILLed with its guardian (a batch
  # system's kill of the whole step) leaves an empty cdrun-<pid> that
  # nobody removes; the next cdrun in the same cgroup does, when its pid
  # is gone (above pid_max: never a process).
  stale=${cgdir%/*}/cdrun-$(($(cat /proc/sys/kernel/pid_max) + 1))
  mkdir "$stale" || fail "cannot make $stale"
  "$CDRUN" --standalone --nproc_per_node=1 --no_python /bin/true ||
    fail "cdrun /bin/true failed"
  [ -d "$stale" ] && { rmdir "$stale"; fail "cdrun left the stale $stale"; }
else
  echo "note: no delegated cgroup v2 here; nested cgroups not tested" >&2
  kill -KILL "$BG"
  wait "$BG" 2>/dev/null
fi
exit 0
