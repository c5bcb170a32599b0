#!/usr/bin/env bash
# The H200 bench (issue 7 must-show 2), resumable across device sessions:
# qwen2.5-7b preset, 4-bit, DPO, 2x256, 20 steps, 4 CPUs per learner —
#   native N=4,8,16 and fork share on N=4,8,16: 3 reps; fork share off N=4:
#   3 reps; native N=1, fork share on N=1,32: 1 rep; then `bench highn` at
#   10 steps (share on).
# Result files go to bench/results (committed here, so the next session sees
# what is done and skips it); everything new comes back in $OUT/results.tgz
# (bench/results + bench/logs) with $OUT/bench.log. No new run starts after
# BUDGET seconds, so a device call (at most 600 s) ends with its last run.
# A sweep that fails (e.g. the fork arm before `machine create --cuda` starts
# the daemon) is reported and the next one still runs.
#
# Here: scripts/device-pack.sh; on the device, carrying .carry/build:
#   scripts/device-bench.sh [BUDGET_S=330]
# Back here: tar xzf <files_at>/results.tgz; smolvm bench summarize bench/results --markdown bench/RESULTS.md
set -uo pipefail
cd "$(dirname "$0")/.."
[[ -e build ]] || ln -s .carry/build build
OUT=${OUT:-$PWD/device-bench-out}
BUDGET=${1:-330}
export SMOLVM_HOME=${SMOLVM_HOME:-/tmp/smolvm-bench-home}
mkdir -p "$OUT" bench/results
start=$(date +%s)
common=(--model qwen2.5-7b --load-in-4bit --method dpo --device cuda --cpus 4 --results bench/results --timeout 240)
failed=0
sweep() {  # matrix|highn flags...
  local kind=$1
  shift
  local left=$((BUDGET - ($(date +%s) - start)))
  ((left > 20)) || return 0
  echo "== bench $kind $*" | tee -a "$OUT/bench.log"
  build/smolvm bench "$kind" "${common[@]}" --budget "$left" "$@" >>"$OUT/bench.log" 2>&1 || {
    failed=1
    echo "!! bench $kind $* failed: $(tail -1 "$OUT/bench.log")" | tee -a "$OUT/bench.log"
  }
}
ratio=(--shapes 2x256 --steps 20 --reps 3)
single=(--shapes 2x256 --steps 20 --reps 1)
sweep matrix --arms native --ns 4,8,16 "${ratio[@]}"
sweep matrix --arms fork --share on --ns 4,8,16 "${ratio[@]}"
sweep matrix --arms fork --share off --ns 4 "${ratio[@]}"
sweep matrix --arms native --ns 1 "${single[@]}"
sweep matrix --arms fork --share on --ns 1,32 "${single[@]}"
sweep highn --share on --batch 2 --maxseq 256 --steps 10
build/smolvm bench summarize bench/results | tee "$OUT/summary.txt"
build/smolvm bench census bench/results | tail -1 | tee -a "$OUT/summary.txt"
tar czf "$OUT/results.tgz" bench/results bench/logs 2>/dev/null
exit $failed
