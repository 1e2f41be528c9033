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
