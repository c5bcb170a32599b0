#!/usr/bin/env bash
# The smolvm Python package against real torch on the GPU machine, natively
# (torch does not run through the shims yet: issue 13): the fork rules'
# detection, the cache emptied before waiting, torch's bad-fork flag cleared
# in an os.fork() child, smolvm.torch.frozen() and mark_frozen(module) on real
# torch.cuda.MemPool / memory_snapshot. About 1 minute; no daemon, no machine.
# Usage: OUT=DIR scripts/device-torch-rules.sh   (PY: the python with torch, default python3)
# Writes $OUT/torch-rules.txt; exits 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${OUT:-$PWD/device-torch-rules-out}
PY=${PY:-python3}
mkdir -p "$OUT"
find_build
B=$BUILD
[[ -f $B/shim/python/smolvm/__init__.py ]] || { echo "no $B/shim/python: build, then scripts/device-pack.sh" >&2; exit 2; }
unset SMOLVM_FORKPOINT_SOCKET SMOLVM_CUDA_SOCKET
PYTHONPATH=$B/shim/python SMOLVM_GUEST_LIB=$B/shim/libsmolvm-guest.so \
  "$PY" python/tests/device_torch_rules.py 2>&1 | tee "$OUT/torch-rules.txt"
exit "${PIPESTATUS[0]}"
