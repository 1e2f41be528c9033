#!/bin/sh
# `cmake --install` of a build tree into a temporary prefix, then the consumer project of
# examples/consumer configured against it with find_package(flashwatt CONFIG) and with pkg-config,
# built and run (a causal forward checked against a naive loop). Also checks what was installed: the
# header, the library and its SONAME, the command, and that every version agrees with CMake's.
#   install_test.sh BUILD_DIR SOURCE_DIR VERSION
set -u
build=$1 src=$2 version=$3
major=${version%%.*}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_install_test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; exit 1; }
libdir=$(ls -d "$prefix"/lib*/cmake/flashwatt 2>/dev/null | head -1)
libdir=${libdir%/cmake/flashwatt}
for f in include/flashwatt.h include/flashwatt_version.h bin/flashwatt; do
    [ -e "$prefix/$f" ] && ok "installed $f" || fail "$f not installed"
done
for f in "libflashwatt.so" "libflashwatt.so.$major" "libflashwatt.so.$version" cmake/flashwatt/flashwattConfig.cmake \
         cmake/flashwatt/flashwattConfigVersion.cmake cmake/flashwatt/flashwattTargets.cmake pkgconfig/flashwatt.pc; do
    [ -e "$libdir/$f" ] && ok "installed ${libdir#"$prefix"/}/$f" || fail "${libdir#"$prefix"/}/$f not installed"
done
if command -v readelf >/dev/null 2>&1; then
    soname=$(readelf -d "$libdir/libflashwatt.so.$version" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
    [ "$soname" = "libflashwatt.so.$major" ] && ok "SONAME $soname" || fail "SONAME '$soname', expected libflashwatt.so.$major"
fi
got=$("$prefix/bin/flashwatt" --version 2>&1)
[ "$got" = "flashwatt $version" ] && ok "installed command: $got" || fail "flashwatt --version says '$got', expected $version"

# configure, build and run the consumer: $1 = find_package | pkg-config
consume() {
    b=$tmp/consumer-$1
    if ! PKG_CONFIG_PATH="$libdir/pkgconfig" cmake -S "$src/examples/consumer" -B "$b" -DCONSUMER_WITH="$1" \
            -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$b.log" 2>&1 ||
       ! cmake --build "$b" >>"$b.log" 2>&1; then
        sed 's/^/    /' "$b.log" | tail -30
        fail "consumer with $1: configure or build failed"
        return
    fi
    grep -E "flashwatt .* from" "$b.log" | sed 's/^-- /    /'
    out=$("$b/consumer" 2>&1)
    rc=$?
    echo "    $out"
    if [ $rc -eq 0 ] && echo "$out" | grep -q "^flashwatt $version (header $version)"; then
        ok "consumer with $1 builds against the installed tree and runs"
    else
        fail "consumer with $1 (exit $rc)"
    fi
}
consume find_package
if command -v pkg-config >/dev/null 2>&1; then
    got=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion flashwatt)
    [ "$got" = "$version" ] && ok "pkg-config --modversion $got" || fail "pkg-config --modversion '$got', expected $version"
    consume pkg-config
    # by hand, as the example's comment shows
    if cc "$src/examples/consumer/consumer.c" -o "$tmp/by-hand" $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs flashwatt) \
          -lm -Wl,-rpath,"$libdir" && "$tmp/by-hand" >/dev/null; then
        ok "cc consumer.c \$(pkg-config --cflags --libs flashwatt)"
    else
        fail "cc with pkg-config's flags"
    fi
else
    echo "note: pkg-config not found; its consumer build skipped"
fi
echo "install_test: $failures failed"
[ "$failures" -eq 0 ]
