#!/usr/bin/env bash
# Configures and builds flashwatt into ${BUILD_DIR:-build} (extra CMake arguments pass through).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" >"$BUILD_DIR.cmake.log" 2>&1 || {
  cat "$BUILD_DIR.cmake.log"; exit 1; }
grep -E "flashwatt: CUDA" "$BUILD_DIR.cmake.log" || true
cmake --build "$BUILD_DIR" -j "$JOBS"
