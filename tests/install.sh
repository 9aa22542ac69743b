#!/bin/sh
# make install into a scratch DESTDIR: the tool runs from there, a program built only from
# what pkg-config says about hachi.pc links and runs (shared, and static with --static), and
# make uninstall removes every file it installed. Usage: tests/install.sh BUILD_DIR (after make).
cd "$(dirname "$0")/.." || exit 1
BUILD=${1:-build}
pass=0; fail=0; skip=0
check() {  # name, then a command that succeeds when the check holds; its output is shown on failure
    name=$1; shift
    if out=$("$@" 2>&1); then echo "ok   $name"; pass=$((pass + 1))
    else echo "FAIL $name"; printf '%s\n' "$out" | sed 's/^/    /'; fail=$((fail + 1)); fi
}
if ! command -v pkg-config >/dev/null; then
    echo "skip install: pkg-config missing"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
tmp=$(mktemp -d); dest=$tmp/root; work=$tmp/work
mkdir -p "$work"
export PKG_CONFIG_PATH="$dest/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dest" PKG_CONFIG_LIBDIR="$dest/usr/lib/pkgconfig"
cat > "$work/use.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <hachi.h>
int main(void) {   /* the version this program was built against and the one it runs with */
    printf("%s %s\n", HACHI_VERSION, hachi_version());
    return strcmp(HACHI_VERSION, hachi_version()) != 0;
}
C
version=$(sed -n 's/^#define HACHI_VERSION "\(.*\)"/\1/p' include/hachi.h)
installs() { make -s install BUILD="$BUILD" DESTDIR="$dest" PREFIX=/usr && test -x "$dest/usr/bin/hachi"; }
tool_runs() { "$dest/usr/bin/hachi" --version | grep -qx "hachi $version"; }
pc_says() { test "$(pkg-config --modversion hachi)" = "$version" && pkg-config --cflags hachi | grep -q "$dest/usr/include"; }
shared_links() {
    ${CC:-cc} "$work/use.c" $(pkg-config --cflags --libs hachi) -o "$work/use-shared" &&
    LD_LIBRARY_PATH="$dest/usr/lib" "$work/use-shared" | grep -qx "$version $version" &&
    readelf -d "$work/use-shared" | grep -q 'NEEDED.*libhachi.so.0'
}
static_links() {
    ${CC:-cc} "$work/use.c" $(pkg-config --cflags hachi) -Wl,-Bstatic $(pkg-config --static --libs hachi) -Wl,-Bdynamic \
        -o "$work/use-static" && "$work/use-static" | grep -qx "$version $version" &&
    ! readelf -d "$work/use-static" | grep -q 'libhachi'
}
uninstalls() { make -s uninstall DESTDIR="$dest" PREFIX=/usr && test -z "$(find "$dest" -type f -o -type l)"; }
check install_into_destdir installs
check install_tool_runs tool_runs
check install_pkg_config pc_says
check install_links_shared shared_links
check install_links_static static_links
check install_uninstall uninstalls
rm -rf "$tmp"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
