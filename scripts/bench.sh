#!/usr/bin/env bash
# The main job: install what is missing, build, and run `flashwatt bench` (its default workload runs
# on the best device available). Arguments go to `flashwatt bench`, e.g. --suite seed --json out.json;
# relative paths in them are the caller's, as with any command. --plot installs matplotlib if missing.
# FLASHWATT_CUDA=OFF scripts/bench.sh builds the CPU backends alone (seconds; the CUDA kernels, built
# where nvcc is found, take minutes on a few cores). BUILD_DIR picks the build directory (default build).
set -euo pipefail
caller=$PWD
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$repo/${BUILD_DIR:-build}
case "${BUILD_DIR:-}" in /*) build=$BUILD_DIR ;; esac
plot=0
for a in "$@"; do
  case $a in --plot | --plot=*) plot=1 ;; esac
done
FLASHWATT_SETUP_PYTHON=0 FLASHWATT_SETUP_PLOT=$plot "$repo/scripts/setup.sh"
BUILD_DIR=$build FW_BUILD_PROGRESS=1 "$repo/scripts/build.sh"
cd "$caller"
"$build/flashwatt" info
exec "$build/flashwatt" bench "$@"
