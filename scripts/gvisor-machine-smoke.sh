#!/usr/bin/env bash
# A gVisor machine end to end with the built smolvm on this host (issue 35):
# create --isolation gvisor with a read-only volume, start, exec (`uname -r`
# is gVisor's, the volume refuses writes, loopback only, the sandbox in the
# machine's cgroup), stop, rm, nothing left. For a host the CI does not
# cover (the GPU machine: cgroup v2). Needs root and runsc ($SMOLVM_RUNSC).
# Usage: OUT=DIR scripts/gvisor-machine-smoke.sh      exit 0 when every check held
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build || { log "no smolvm in $BUILD"; exit 1; }
[[ $(id -u) == 0 ]] || { log "machines need root"; exit 1; }
make_workdir smolvm-gvsmoke || exit 1
OUT=${OUT:-$W}
export SMOLVM_HOME=$W/home SMOLVM_SHIM_DIR=$BUILD/shim SMOLVM_CGROUP_PARENT=smolvm-gvsmoke-$$
S=$BUILD/smolvm
mkdir -p "$W/ro" && echo host >"$W/ro/file"
on_exit "$S machine rm --force --name gv >/dev/null 2>&1"
fails=0
check() {  # check NAME EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then summary "ok   $1: $3"; else summary "FAIL $1: expected '$2', got '$3'"; fails=$((fails + 1)); fi
}
$S machine create --name gv --isolation gvisor --mem 512 -v "$W/ro:/ro:ro" -- sleep 1000 || exit 1
t0=$SECONDS
$S machine start --name gv || { cat "$SMOLVM_HOME/machines/gv/log"; exit 1; }
summary "start took $((SECONDS - t0)) s; $(tr '\n' ' ' <"$SMOLVM_HOME/machines/gv/gvisor/log/smolvm.txt")"
check "uname -r" 4.4.0 "$($S machine exec --name gv -- uname -r)"
check "read-only volume" refused "$($S machine exec --name gv -- sh -c 'echo x > /ro/new 2>/dev/null && echo written || echo refused')"
check "network" lo "$($S machine exec --name gv -- sh -c "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")"
sandbox=$(pgrep -f "runsc-sandbox.*$SMOLVM_HOME" | head -1)
check "the sentry in the machine's cgroup" yes "$(grep -q "$SMOLVM_CGROUP_PARENT/gv" "/proc/$sandbox/cgroup" 2>/dev/null && echo yes || echo no)"
$S machine stop --name gv >/dev/null
check "state after stop" stopped "$($S machine list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["state"])')"
$S machine rm --name gv >/dev/null
check "runsc processes left" 0 "$(pgrep -fc "runsc.*$SMOLVM_HOME")"
check "cgroups left" 0 "$(find /sys/fs/cgroup -maxdepth 3 -name "$SMOLVM_CGROUP_PARENT" -exec find {} -mindepth 1 -maxdepth 1 -type d \; | wc -l)"
find /sys/fs/cgroup -maxdepth 3 -name "$SMOLVM_CGROUP_PARENT" -exec rmdir {} \; 2>/dev/null
log "$fails failed"
((fails == 0))
