#!/usr/bin/env bash
# Configures and builds flashwatt into ${BUILD_DIR:-build} (extra CMake arguments pass through).
# CMAKE_BUILD_TYPE in the environment: the build type (default Release).
# FLASHWATT_CUDA=AUTO|ON|OFF in the environment: the CUDA backends where nvcc is found (AUTO, the default),
# always, or never (a CPU-only build takes seconds; the CUDA kernels take minutes on a few cores).
# FW_BUILD_PROGRESS=1: say what is being built, one line per CUDA file, instead of the build's own output
# (which is printed in full if the build fails).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cuda=(-DFLASHWATT_CUDA="${FLASHWATT_CUDA:-AUTO}")
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" "${cuda[@]}" "$@" >"$BUILD_DIR.cmake.log" 2>&1 || {
  cat "$BUILD_DIR.cmake.log"; exit 1; }
grep -E "flashwatt: CUDA" "$BUILD_DIR.cmake.log" | sed 's/^-- //' || true
if [ "${FW_BUILD_PROGRESS:-0}" = 1 ]; then
  t0=$(date +%s)
  what="the C sources take seconds"
  grep -q "flashwatt: CUDA backends ON" "$BUILD_DIR.cmake.log" && what="the CUDA files listed below take the time"
  echo "building into $BUILD_DIR with $JOBS jobs ($what)"
  if ! cmake --build "$BUILD_DIR" -j "$JOBS" 2>&1 | tee "$BUILD_DIR.build.log" |
       sed -un 's#^\(\[[^]]*\]\) Building CUDA object .*\.dir/\(.*\)\.o$#  \1 \2#p'; then
    tail -40 "$BUILD_DIR.build.log"
    echo "build failed; the whole log: $BUILD_DIR.build.log" >&2
    exit 1
  fi
  echo "built in $(( $(date +%s) - t0 )) s"
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
