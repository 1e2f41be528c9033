#!/bin/bash
# A/B of a kernel change on the GPU machine, in one device call: the whole of bench/device_f32.sh on the tree as
# it is (the candidate: build, tests, sanitizers, benchmark, PyTorch), then the benchmark cases given, with the
# change taken out (base) and put back (cand) in turn, each rebuilt incrementally: adjacent in time, on one card.
#   usage (repository root, GPU machine):  bash bench/device_f32_ab.sh CHANGE.patch seed:128 seed:256 ...
#   CHANGE.patch: the change as a diff against the base (git diff), already applied to the tree.
#   FW_AB_FULL=0 skips the full run (a build only); FW_AB_ROUNDS=n alternates base/cand n times (default 2).
# Logs under $OUT/full (the full run) and, packed into $OUT/ab_logs.tgz at the end (the device tool brings back a
# limited number of files), ab_<side>_<case>_<round>.log; the last lines are the table.
set -u
PATCHF=$1; shift
OUT=${OUT:-/tmp/fw_f32_out}
mkdir -p "$OUT"
LOGS=/tmp/fw_ab_logs
rm -rf "$LOGS"; mkdir -p "$LOGS"
SRC=/tmp/fw_f32_src
if [ "${FW_AB_FULL:-1}" = 1 ]; then
    OUT=$OUT/full bash bench/device_f32.sh > "$OUT/full.txt" 2>&1
    echo "full run rc=$?"; tail -40 "$OUT/full.txt"
else
    OUT=$OUT/full FW_F32_BENCH_ONLY=none:0 bash bench/device_f32.sh > "$OUT/full.txt" 2>&1
    echo "build rc=$?"; grep -E "build:|spill" "$OUT/full.txt" | head -5
fi
side() { # $1 = base | cand: the private copy's kernels without / with the change, rebuilt
    local dir=-R
    [ "$1" = cand ] && dir=
    if [ "$1" != "$CUR" ]; then
        patch $dir -s -d "$SRC" -p1 < "$PATCHF" || { echo "patch $dir failed"; exit 1; }
        make -C "$SRC/build" -j16 gpu_cuda_f32 > "$LOGS/rebuild_$1.log" 2>&1 || { tail -20 "$LOGS/rebuild_$1.log"; exit 1; }
        CUR=$1
    fi
}
CUR=cand
for r in $(seq 1 "${FW_AB_ROUNDS:-2}"); do
    for s in base cand; do
        side $s
        for c in "$@"; do
            OUT=$LOGS/ab FW_BUILD_DIR=$SRC/build FW_F32_BENCH_ONLY=$c bash bench/device_f32.sh \
                > "$LOGS/ab_${s}_${c/:/}_$r.log" 2>&1
        done
    done
done
echo "== A/B (ms per call, graph = device time; cuda-flash-f32 default rows and torch-free: the C benchmark only)"
for c in "$@"; do
    for s in base cand; do
        for r in $(seq 1 "${FW_AB_ROUNDS:-2}"); do
            grep -E "cuda-flash-f32 .* default " "$LOGS/ab_${s}_${c/:/}_$r.log" |
                awk -v s=$s -v c=$c -v r=$r '{printf "%-9s %-4s r%s %-7s %9s ms graph %s\n", c, s, r, $3, $5, $NF}'
        done
    done
done
tar czf "$OUT/ab_logs.tgz" -C "$LOGS" .
