#!/bin/bash
# make install DESTDIR=... PREFIX=/usr: the tree holds the binaries, man
# pages, pg.h, libpg (static, libpg.so.0 and its libpg.so link), libpg.pc
# for the install PREFIX and the systemd unit; a tiny program builds with
# pkg-config against that tree and runs on its libpg.so.0.  A second
# PREFIX, without rebuilding, gets its own libpg.pc and ExecStart.
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v make >/dev/null || skip "no make"
command -v pkg-config >/dev/null || skip "no pkg-config"
# Install the build this run tests (the sanitizer one under `make asan`):
# everything is built already, so make only copies.
san=()
sanflags=()
case $CDRUN in
  */build/asan/*) san=(SAN=1)
                  sanflags=(-fsanitize=address,undefined) ;;
esac

# install_into DESTDIR PREFIX
install_into() {
  env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make -C "$ROOT" -s install "${san[@]}" DESTDIR="$1" PREFIX="$2" \
    >"$T/install.out" 2>&1 || { cat "$T/install.out"; fail "make install failed"; }
}

D=$T/root
install_into "$D" /usr
for f in bin/cdrun bin/rdzvd; do
  [ -x "$D/usr/$f" ] || fail "$f not installed (or not executable)"
done
for f in share/man/man1/cdrun.1 share/man/man8/rdzvd.8 \
         share/man/man3/libpg.3 include/pg.h lib/libpg.a lib/libpg.so.0 \
         lib/pkgconfig/libpg.pc lib/systemd/system/rdzvd.service; do
  [ -f "$D/usr/$f" ] || fail "$f not installed"
done
[ -L "$D/usr/lib/libpg.so" ] || fail "lib/libpg.so is not a symlink"
expect_eq "libpg.so link" "$(readlink "$D/usr/lib/libpg.so")" libpg.so.0
if command -v readelf >/dev/null; then
  readelf -d "$D/usr/lib/libpg.so.0" | grep -q 'SONAME.*\[libpg.so.0\]' ||
    fail "libpg.so.0 has no SONAME libpg.so.0"
fi
expect_grep '^prefix=/usr$' "$D/usr/lib/pkgconfig/libpg.pc"
# The build tree's own libpg.pc points at the build tree, not at PREFIX.
if [ ${#san[@]} -eq 0 ]; then
  expect_grep "^libdir=$ROOT/lib\$" "$ROOT/lib/libpg.pc"
  expect_grep "^includedir=$ROOT/libpg/include\$" "$ROOT/lib/libpg.pc"
fi
expect_grep '^ExecStart=/usr/bin/rdzvd ' "$D/usr/lib/systemd/system/rdzvd.service"
"$D/usr/bin/rdzvd" --version | grep -q '^rdzvd ' || fail "installed rdzvd --version"
# Nothing leaked outside DESTDIR/PREFIX.
extra=$(cd "$D" && find . -type f -o -type l | grep -v '^\./usr/' || true)
[ -z "$extra" ] || fail "installed outside PREFIX: $extra"

# pkg-config against the DESTDIR tree, as a distribution build would.
export PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_LIBDIR=$D/usr/lib/pkgconfig
pkg-config --exists libpg || fail "pkg-config does not find libpg.pc"
cflags=$(pkg-config --cflags libpg | xargs) || fail "pkg-config --cflags libpg"
libs=$(pkg-config --libs libpg | xargs) || fail "pkg-config --libs libpg"
expect_eq "pkg-config --cflags" "$cflags" "-I$D/usr/include"
expect_eq "pkg-config --libs" "$libs" "-L$D/usr/lib -lpg"
cat >"$T/hello.c" <<'EOF'
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <pg.h>

int main(void)
{
  /* Not under cdrun: pg_init must refuse, naming what is missing. */
  pg_group *g = NULL;
  struct pg_options o = PG_OPTIONS_INIT;
  int err = pg_init(&o, &g);

  printf("%s %s\n", pg_err_name(-EINVAL), err ? "refused" : "joined");
  return 0;
}
EOF
# shellcheck disable=SC2086
cc "${sanflags[@]}" $cflags -o "$T/hello" "$T/hello.c" $libs ||
  fail "a libpg program does not build with pkg-config"
env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
  LD_LIBRARY_PATH="$D/usr/lib" "$T/hello" >"$T/hello.out" 2>&1 ||
  { cat "$T/hello.out"; fail "the libpg program failed"; }
expect_grep '^EINVAL refused$' "$T/hello.out"
if command -v ldd >/dev/null; then
  LD_LIBRARY_PATH="$D/usr/lib" ldd "$T/hello" | grep -q "$D/usr/lib/libpg.so.0" ||
    fail "the program did not load the installed libpg.so.0"
fi
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR

# Another PREFIX, same build: the .pc and the unit follow it.
install_into "$T/root2" /opt/cdrun
expect_grep '^prefix=/opt/cdrun$' "$T/root2/opt/cdrun/lib/pkgconfig/libpg.pc"
expect_grep '^ExecStart=/opt/cdrun/bin/rdzvd ' \
  "$T/root2/opt/cdrun/lib/systemd/system/rdzvd.service"
exit 0
