#!/bin/sh
# libflashwatt.so exports exactly the public API: every FW_API function of include/flashwatt.h, and
# no other symbol (no internal fw_* helper, no CUDA runtime, cuBLAS or C++ symbol).
#   exports_test.sh LIBRARY HEADER
set -u
lib=$1 header=$2
command -v nm >/dev/null 2>&1 || { echo "exports_test: nm not found, skipped"; exit 77; }
tmp=${TMPDIR:-/tmp}/fw_exports.$$
trap 'rm -f "$tmp".*' EXIT
sed -n 's/^FW_API [^(]*[ *]\(fw_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u > "$tmp.declared"
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u > "$tmp.exported"
declared=$(wc -l < "$tmp.declared")
status=0
extra=$(comm -13 "$tmp.declared" "$tmp.exported")
missing=$(comm -23 "$tmp.declared" "$tmp.exported")
if [ "$declared" -lt 40 ]; then
    echo "FAIL only $declared FW_API declarations found in $header (the pattern no longer matches)"; status=1
fi
if [ -n "$extra" ]; then
    echo "FAIL exported but not in the public API:"; echo "$extra" | sed 's/^/  /'; status=1
fi
if [ -n "$missing" ]; then
    echo "FAIL declared FW_API but not exported:"; echo "$missing" | sed 's/^/  /'; status=1
fi
[ $status = 0 ] && echo "PASS $lib exports exactly the $declared public functions of $(basename "$header")"
exit $status
