#!/usr/bin/env bash
# Every test: install what is missing, build (CUDA backends too where nvcc exists), run the C tests
# (GPU tests report "skipped" where there is no GPU), the Python tests, then the C tests again under
# AddressSanitizer + UBSan (the fuzz targets among them), and the thread tests under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
t0=$(date +%s)

echo "== build (Release)"
scripts/build.sh
echo "== ctest (Release)"
(cd build && ctest --output-on-failure -j "$(nproc)")

echo "== pytest"
FLASHWATT_LIBRARY="$PWD/build/libflashwatt.so" python3 -m pytest -q python/tests

echo "== build (ASan + UBSan, CPU only)"
BUILD_DIR=build-asan scripts/build.sh -DFLASHWATT_SANITIZE=ON -DFLASHWATT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
echo "== ctest (ASan + UBSan)"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -j "$(nproc)" -L cpu)

echo "== build (ThreadSanitizer, CPU only) and the thread tests under it"
# clang where there is one (its TSan runtime with libomp); OpenMP's own runtime is not instrumented,
# so its accesses are left out (ignore_noninstrumented_modules), ours inside its threads are not.
TSAN_CC=$(command -v clang || command -v cc)
CC="$TSAN_CC" cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLASHWATT_TSAN=ON -DFLASHWATT_CUDA=OFF \
  >build-tsan.cmake.log 2>&1 || { cat build-tsan.cmake.log; exit 1; }
cmake --build build-tsan -j "$(nproc)" --target test_threads >/dev/null
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1" \
  ctest --output-on-failure -R '^test_threads$')

echo "== all tests passed in $(( $(date +%s) - t0 )) s"
