#!/usr/bin/env bash
# The main job: install what is missing, build, and run `flashwatt bench` (its default workload runs
# on the best device available). Arguments go to `flashwatt bench`, e.g. --suite seed --json out.json
set -euo pipefail
cd "$(dirname "$0")/.."
FLASHWATT_SETUP_PYTHON=0 scripts/setup.sh
scripts/build.sh >/dev/null
./build/flashwatt info
./build/flashwatt bench "$@"
