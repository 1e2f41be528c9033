#!/usr/bin/env bash
# Installs what building and testing flashwatt needs, only where it is missing:
# a C compiler with OpenMP, CMake >= 3.22, make, Python 3 with NumPy, pytest and scikit-build-core
# (FLASHWATT_SETUP_PYTHON=0: none of the Python packages), and matplotlib with FLASHWATT_SETUP_PLOT=1.
# CUDA is optional: when nvcc is on PATH (or in /usr/local/cuda/bin) the GPU backends are built too.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
if ((${#need_apt[@]})); then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
  else
    echo "setup: please install: ${need_apt[*]}" >&2
    exit 1
  fi
fi
# pip_install PACKAGE...: into the user's python3 (also where the system Python is "externally managed")
pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"
}
# The tests: NumPy, pytest, and scikit-build-core (the Python package's build backend, which the
# pip-install test uses without downloading it).
if [ "${FLASHWATT_SETUP_PYTHON:-1}" = 1 ]; then
  python3 -c 'import numpy, pytest' >/dev/null 2>&1 || pip_install numpy pytest
  python3 -c 'import scikit_build_core' >/dev/null 2>&1 || pip_install scikit-build-core ||
    echo "setup: scikit-build-core could not be installed: the pip-install test will download it or skip" >&2
fi
# `flashwatt bench --plot` draws with matplotlib (scripts/bench.sh asks for it when --plot is given).
if [ "${FLASHWATT_SETUP_PLOT:-0}" = 1 ] && ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
  echo "setup: installing matplotlib for --plot" >&2
  pip_install numpy matplotlib || {
    echo "setup: matplotlib could not be installed; --plot needs it (python3 -m pip install matplotlib)" >&2; exit 1; }
fi
