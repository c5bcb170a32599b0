#!/usr/bin/env bash
# Sync round trip through the shim for several spin budgets (guest/worker),
# to choose the defaults. Runs on the device from the repo root, build/ carried.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-spin-out}
mkdir -p "$OUT"
for combo in 0/0 20/0 0/20 20/20 50/50 200/200; do
  g=${combo%/*} w=${combo#*/}
  sock=$(mktemp -u /tmp/spin.XXXXXX).sock
  SMOLVM_WORKER_SPIN_US=$w setsid build/smolvm _cuda-daemon "$sock" --backend cuda --quiet &
  d=$!
  for _ in $(seq 200); do [[ -S $sock.admin ]] && break; sleep 0.05; done
  r=$(SMOLVM_SPIN_US=$g SMOLVM_CUDA_SOCKET=$sock LD_LIBRARY_PATH=$PWD/build/shim:${LD_LIBRARY_PATH:-} \
      timeout 60 build/tests/gpu/micro_bench roundtrip 2>/dev/null | head -1)
  echo "{\"guest_spin_us\":$g,\"worker_spin_us\":$w,\"result\":${r:-null}}" | tee -a "$OUT/spin.jsonl"
  kill -TERM "$d"; wait "$d" 2>/dev/null
done
