#!/bin/bash
# .py targets run under python3 -u (or $PYTHON_EXEC); -m runs a module;
# arguments after the target pass through untouched.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || skip "python3 is not installed"
mkdir -p "$T/pkg/mymod"
cat >"$T/script.py" <<'PY'
import os, sys
rank = os.environ["RANK"]
with open(os.path.join(sys.argv[1], "py." + rank), "w") as f:
    f.write(" ".join(sys.argv[2:]) + "\n")
    f.write("unbuffered=%d\n" % ("-u" in getattr(sys, "orig_argv", ["-u"])))
    f.write("exe=%s\n" % sys.executable)
PY
cp "$T/script.py" "$T/pkg/mymod/__main__.py"
touch "$T/pkg/mymod/__init__.py"

"$CDRUN" --nproc_per_node=2 "$T/script.py" "$T" --nproc_per_node=9 -x "a b" \
  2>"$T/err" || { cat "$T/err"; fail "script.py failed"; }
for r in 0 1; do
  expect_eq "py args rank $r" "$(sed -n 1p "$T/py.$r")" "--nproc_per_node=9 -x a b"
  expect_eq "py -u rank $r" "$(sed -n 2p "$T/py.$r")" "unbuffered=1"
done
rm -f "$T"/py.*

PYTHONPATH=$T/pkg "$CDRUN" --nproc_per_node=2 -m mymod "$T" --flag 2>"$T/err" ||
  { cat "$T/err"; fail "-m mymod failed"; }
expect_eq "module args" "$(sed -n 1p "$T/py.1")" "--flag"
rm -f "$T"/py.*

# PYTHON_EXEC picks the interpreter.
printf '#!/bin/sh\necho "$@" > "%s/interp"\n' "$T" >"$T/fakepy"
chmod +x "$T/fakepy"
PYTHON_EXEC=$T/fakepy "$CDRUN" "$T/script.py" x 2>"$T/err" || fail "PYTHON_EXEC"
expect_eq "PYTHON_EXEC argv" "$(cat "$T/interp")" "-u $T/script.py x"

# --no_python runs the command as is.
"$CDRUN" --no_python /bin/sh -c 'echo "$RANK" > "$0/nopy"' "$T" || fail "no_python"
expect_eq "no_python" "$(cat "$T/nopy")" 0
exit 0
