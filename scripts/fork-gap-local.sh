#!/usr/bin/env bash
# Where a `machine fork --count N` of a --cuda golden spends its time, on the
# fake backend (no GPU): tests/shim's prog_fork as the golden, holding
# HOST_MIB of touched private memory and PINNED_MIB of pinned memory (like a
# learner's host state), forked N ways in one request. Prints the per-clone
# timeline: the supervisor's line (order, c1, cgroup, unshared, mounts, init,
# and the daemon's built, released, hello on the same clock) and the
# daemon's line per clone.
# Usage: scripts/fork-gap-local.sh [N=8] [HOST_MIB=2048] [PINNED_MIB=64]
# Runs as root from the repository root with build/ built. Leaves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
N=${1:-8} HOST_MIB=${2:-2048} PINNED_MIB=${3:-64}
BUILD=""
find_build
make_workdir fork-gap
export SMOLVM_HOME=$W/home SMOLVM_CGROUP_PARENT=smolvm-gap-$$ SMOLVM_CUDA_BACKEND=fake
export SMOLVM_CUDA_POOL=$((N + 1)) SMOLVM_CUDA_SPARES=1
unset SMOLVM_CUDA_SOCKET SMOLVM_SHIM_DIR
SMOLVM=$BUILD/smolvm
mkdir -p "$SMOLVM_HOME" "$W/out" && chmod 0777 "$W/out"
cleanup() {
  touch "$W/out/exit"
  "$SMOLVM" machine rm --name gold --cascade --grace 2 >/dev/null 2>&1 ||
    "$SMOLVM" machine rm --name gold --force --grace 0 >/dev/null 2>&1
  "$SMOLVM" cuda shutdown --grace 10 >/dev/null 2>&1
  rmdir /sys/fs/cgroup/"$SMOLVM_CGROUP_PARENT" 2>/dev/null
  for h in /sys/fs/cgroup/*/; do rmdir "$h$SMOLVM_CGROUP_PARENT" 2>/dev/null; done
}
on_exit cleanup
"$SMOLVM" machine create --name gold --cpus 2 --cuda -e PROG_FORK_HOLD=1 -e PROG_FORK_HOST_MIB="$HOST_MIB" \
  -e PROG_FORK_PINNED_MIB="$PINNED_MIB" -v "$BUILD:/opt/smolvm:ro" -v "$W/out:/out" \
  -- /opt/smolvm/tests/shim/bin/prog_fork /out 96 4 >/dev/null || exit 1
"$SMOLVM" machine start --name gold --forkable >/dev/null || exit 1
for _ in $(seq 600); do
  "$SMOLVM" machine list --json | grep -q '"at forkpoint"' && break
  sleep 0.1
done
for _ in $(seq 300); do
  n=$("$SMOLVM" cuda status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ready_workers"])')
  [[ ${n:-0} -ge $N ]] && break
  sleep 0.1
done
t0=$(date +%s%3N)
"$SMOLVM" machine fork --golden gold --count "$N" --name-prefix kid --share-weights --timeout 120 || exit 1
echo "machine fork --count $N: $(($(date +%s%3N) - t0)) ms end to end (host $HOST_MIB MiB, pinned $PINNED_MIB MiB)"
"$SMOLVM" machine logs --name gold >"$W/gold.log"
grep -E "fork: " "$W/gold.log"
grep -E "fork: clone|clone build|attached .* after" "$SMOLVM_HOME/cuda/daemon.log"
python3 scripts/fork_timeline.py "$W/gold.log" "$SMOLVM_HOME/cuda/daemon.log"
for i in 0 $((N - 1)); do echo "kid-$i: $("$SMOLVM" machine logs --name "kid-$i" | grep "clone attach")"; done
