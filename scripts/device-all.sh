#!/usr/bin/env bash
# One device call that gathers this project's GPU evidence, phase by phase,
# each time-boxed: the remoted-CUDA check (programs, concurrent fault,
# memory), the GPU fork (16 clones of an 8 GiB golden), then the learner's
# device checks, then cuBLAS/NVML through the shims. Results in $OUT as a few files (the device tool brings
# back at most 8). Run from the repo root with build/ (or .carry/build).
# Usage: scripts/device-all.sh [LEARNER_PHASES...]   (default: tests models train7b4 load)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
OUT=${OUT:-$PWD/device-all-out}
mkdir -p "$OUT"
phases=("$@")
((${#phases[@]})) || phases=(tests models train7b4 load)
timeout 120 scripts/device-check.sh --phase env,programs,concurrent,memory >"$OUT/check.txt" 2>&1
tail -9 "$OUT/check.txt"
timeout 150 scripts/device-fork.sh 8192 512 16 >/dev/null 2>&1
grep -E "prepare|clone build|built|fork: clone" "$OUT/fork-daemon.log" >"$OUT/fork-timing.txt"
cat "$OUT/fork-summary.txt"
head -4 "$OUT/fork-timing.txt"
OUT=$OUT/blas timeout 200 scripts/device-blas.sh >/dev/null 2>&1
cat "$OUT/blas/summary.txt" 2>/dev/null | tail -12
args=()
for p in "${phases[@]}"; do args+=(--phase "$p"); done
timeout 330 learner/device_check.sh "$OUT/learner" "${args[@]}" --phase summary
cat "$OUT/learner/summary.json" 2>/dev/null | head -c 3000
tar czf "$OUT/results.tgz" -C "$OUT" learner blas check.txt fork-daemon.log clones.tgz fork-timing.txt \
  diffs.txt summary.txt logs.tar.gz 2>/dev/null
rm -rf "$OUT/learner" "$OUT/blas" "$OUT"/logs.tar.gz "$OUT"/clones.tgz "$OUT"/fork-daemon.log "$OUT"/diffs.txt "$OUT"/summary.txt
