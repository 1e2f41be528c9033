# Sourced by the device scripts: everything printed also goes to LOG, each step's own logs go into
# $LOGS (a temporary directory) and travel as ARCHIVE when the script exits with $status.
#   . bench/steps.sh LOG ARCHIVE
LOGS=$(mktemp -d)
exec > >(tee -a "$1") 2>&1
status=0
FW_STEPS_ARCHIVE=$2
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
finish() {
    tar -C "$LOGS" -czf "$FW_STEPS_ARCHIVE" . 2>/dev/null
    exit $status
}
trap finish EXIT
# build_step DIR: configure (Release) and make -j16 into DIR, log in $LOGS/build.log; on failure print
# its errors and exit the script with status 1
build_step() {
    step "build"
    if ! { cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=Release && make -C "$1" -j16; } > "$LOGS/build.log" 2>&1; then
        grep -E "error|warning" "$LOGS/build.log" | head -20
        tail -20 "$LOGS/build.log"
        echo "BUILD FAILED"
        status=1
        exit
    fi
    grep -E "C7513|spill" "$LOGS/build.log" | head -5
    tail -1 "$LOGS/build.log"
}
