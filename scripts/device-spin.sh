#!/usr/bin/env bash
# Sync round trip through the shim for several spin budgets (guest/worker),
# to choose the defaults. Runs on the device from the repo root, build/ carried.
# Output: $OUT/spin.jsonl, $OUT/spin-daemon.log. BACKEND=fake: a dry run here.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
OUT=${OUT:-$PWD/device-spin-out}
mkdir -p "$OUT"
make_workdir device-spin
on_exit daemon_stop
for combo in 0/0 20/0 0/20 20/20 50/50 200/200; do
  g=${combo%/*} w=${combo#*/}
  sock=$W/spin-$g-$w.sock
  SMOLVM_WORKER_SPIN_US=$w daemon_start "$sock" "$OUT/spin-daemon.log" --backend "${BACKEND:-cuda}" --quiet
  r=$(SMOLVM_SPIN_US=$g SMOLVM_CUDA_SOCKET=$sock LD_LIBRARY_PATH=$BUILD/shim:${LD_LIBRARY_PATH:-} \
      timeout 60 "$BUILD/tests/gpu/micro_bench" roundtrip 2>/dev/null | head -1)
  echo "{\"guest_spin_us\":$g,\"worker_spin_us\":$w,\"result\":${r:-null}}" | tee -a "$OUT/spin.jsonl"
  daemon_stop
done
