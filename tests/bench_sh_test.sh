#!/bin/sh
# The README's first command as a newcomer runs it, on an already built tree (BUILD_DIR): from another
# directory, with relative output paths. The build says what it builds; --json lands in the caller's
# directory, not in the repository; the bench runs.
#   bench_sh_test.sh SOURCE_DIR BUILD_DIR CUDA(ON|OFF) BUILD_TYPE
set -u
src=$1 build=$2 cuda=$3 build_type=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fw_bench_sh.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$tmp" || exit 1
failures=0
# the build directory's own CUDA setting and build type, so that the script rebuilds nothing
if ! FLASHWATT_CUDA=$cuda CMAKE_BUILD_TYPE=$build_type BUILD_DIR=$build "$src/scripts/bench.sh" --backend cpu-ref --heads 1 --seqlen 32 --reps 1 \
        --json rel.json >out.txt 2>err.txt; then
    echo "FAIL: scripts/bench.sh exited non-zero"; sed 's/^/    /' out.txt err.txt | tail -30; exit 1
fi
if [ -s rel.json ] && [ ! -e "$src/rel.json" ]; then echo "ok: --json rel.json written in the caller's directory"
else echo "FAIL: --json rel.json not in the caller's directory"; failures=$((failures + 1)); fi
if grep -q "^flashwatt: CUDA backends $cuda" out.txt; then echo "ok: the build says whether it builds the CUDA backends"
else echo "FAIL: no 'flashwatt: CUDA backends $cuda' line"; sed 's/^/    /' out.txt | head; failures=$((failures + 1)); fi
if grep -q "1 ran, 0 skipped" out.txt; then echo "ok: the bench ran"
else echo "FAIL: the bench did not run its row"; failures=$((failures + 1)); fi
echo "bench_sh_test: $failures failed"
[ "$failures" -eq 0 ]
