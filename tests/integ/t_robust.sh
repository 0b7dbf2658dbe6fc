#!/bin/bash
# Hostile surroundings: closed standard fds, odd error files, numbers at
# the edge of int, a restart that ends well.
. "$(dirname "$0")/lib.sh"

# Started with stdin and stdout closed, cdrun's own fds must not land on
# 0..2 (libuv asserts when it closes one).
mkdir "$T/c"
"$CDRUN" --standalone --nproc_per_node=2 "$TW" env "$T/c" <&- >&- \
  2>"$T/c.err"
rc=$?
[ "$rc" -eq 0 ] || { cat "$T/c.err"; fail "closed stdin/stdout: exit $rc"; }
[ -f "$T/c/env.1" ] || fail "closed stdin/stdout: workers did not run"
"$CDRUN" --standalone "$TW" env "$T/c" <&- >&- 2>&-
expect_eq "all of 0..2 closed: exit status" "$?" 0

# A FIFO at TORCHELASTIC_ERROR_FILE must not block the agent.
bg_cdrun --standalone --log_dir "$T/fifo" "$TW" errfifo
wait_exit "$BG" 60
expect_eq "FIFO error file: exit status" "$RC" 1
expect_grep 'error file: .*error.json is not a regular file' "$T/err"

# A malformed error file is reported, not dropped.
"$CDRUN" --standalone --log_dir "$T/bad" "$TW" errbad 2>"$T/bad.err"
expect_eq "malformed error file: exit status" "$?" 1
expect_grep 'traceback : cannot use error file: invalid JSON near byte' \
  "$T/bad.err"

# A world size that does not fit in an int is refused before anything runs.
"$CDRUN" --nnodes=2147483647 --node_rank=2147483646 --nproc_per_node=2 \
  "$TW" env "$T/c" 2>"$T/ovf.err"
expect_eq "world size overflow: exit status" "$?" 2
expect_grep 'world size .* exceeds 2147483647' "$T/ovf.err"
"$CDRUN" --nproc_per_node=70000 "$TW" env "$T/c" 2>"$T/np.err"
expect_eq "--nproc_per_node=70000: exit status" "$?" 2
expect_grep "nproc_per_node: invalid value '70000' \(expected an integer 1\.\.65536" \
  "$T/np.err"
"$CDRUN" --shutdown_timeout=1e30 "$TW" env "$T/c" 2>"$T/st.err"
expect_eq "--shutdown_timeout=1e30: exit status" "$?" 2
expect_grep "shutdown_timeout: invalid value '1e30' \(expected a number of seconds 0\.\.10000000\)" \
  "$T/st.err"

# A run that failed once, wrote an error file, then succeeded after a
# restart: no failure left to read, so no pointer to error files, and the
# temporary log directory is gone.
mkdir "$T/tmp"
TMPDIR=$T/tmp "$CDRUN" --standalone --max_restarts=1 "$TW" errfile once 1 \
  2>"$T/r.err"
rc=$?
[ "$rc" -eq 0 ] || { cat "$T/r.err"; fail "restart then success: exit $rc"; }
expect_grep 'restarting it' "$T/r.err"
grep -q 'error files are in' "$T/r.err" &&
  fail "a successful run points to error files"
[ -z "$(ls -A "$T/tmp")" ] || fail "temporary log dir left: $(ls "$T/tmp")"
exit 0
