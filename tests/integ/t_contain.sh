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
exit 0
