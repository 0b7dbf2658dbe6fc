#!/bin/bash
# libpg: a rank SIGKILLed in the middle of a stream of all-reduces gives
# every other rank an error within the timeout -- never a hang, never a
# crash -- through shared memory and through TCP.  The ranks are started
# by hand (cdrun would stop the survivors as soon as the victim died).
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest
timeout_s=3
for hid in same-host tcp; do
  d=$T/$hid
  mkdir "$d"
  port=$(free_port)
  pids=()
  for r in 0 1 2 3; do
    h=$hid
    [ "$hid" = tcp ] && h=h$r
    RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PG_TIMEOUT=$timeout_s \
      PG_HOST_ID=$h "$PGTEST" victim 2 "$d" 2>"$d/log.$r" &
    pids+=($!)
    STARTED+=($!)
  done
  for r in 0 1 2 3; do
    wait_exit "${pids[$r]}" 30
    if [ "$r" -eq 2 ]; then
      expect_eq "victim status" "$RC" 137
    else
      expect_eq "rank $r status ($hid)" "$RC" 0
    fi
  done
  for r in 0 1 3; do
    [ -f "$d/err.$r" ] || { cat "$d/log.$r"; fail "rank $r wrote no error ($hid)"; }
    read -r name secs rest <"$d/err.$r"
    case $name in
      ETIMEDOUT|ECONNRESET|EPIPE|EPEERFAIL) ;;
      *) fail "rank $r ($hid): unexpected error $name: $rest" ;;
    esac
    awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s <= t + 2) }' ||
      fail "rank $r ($hid): error after ${secs}s, timeout ${timeout_s}s"
    echo "$hid rank $r: $name after ${secs}s: $rest" >&2
  done
done
exit 0
