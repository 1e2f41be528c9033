#!/usr/bin/env bash
# Installs what building and testing flashwatt needs, only where it is missing:
# a C compiler with OpenMP, CMake >= 3.22, make, Python 3 with NumPy and pytest.
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
if [ "${FLASHWATT_SETUP_PYTHON:-1}" = 1 ]; then
  if ! python3 -c 'import numpy, pytest' >/dev/null 2>&1; then
    python3 -m pip install -q numpy pytest 2>/dev/null ||
      python3 -m pip install -q --break-system-packages numpy pytest
  fi
fi
