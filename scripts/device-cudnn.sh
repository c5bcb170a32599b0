#!/usr/bin/env bash
# Issue 13 item 3/4 on the H200: cuDNN's backend API natively and through the
# shims (daemon --backend cuda --cuda-libs <the same cuDNN>), from the repo
# root with build/ (or .carry/build from scripts/device-pack.sh) carried.
#   1. prog_dnn natively, twice (are two native runs bit-identical?), then
#      through the shims: its "digest <graph> <hex>" lines must be identical
#      to the native ones (pointwise graph with a by-value scalar, fp32 matmul).
#   2. the daemon log names the libcudnn / libcublas files and versions the
#      workers loaded, and prog_dnn's "cudnn version" line matches natively.
# Writes to $OUT (at most 8 files): native1.txt native2.txt shim.txt
# daemon.log summary.txt. About 1 minute. Exits 1 unless the shim's digests
# and version are identical to the native ones.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${OUT:-$PWD/device-cudnn-out}
mkdir -p "$OUT"
# The build tree: $BUILD or build/, else what scripts/device-pack.sh made (.carry/build).
find_build
BIN=$BUILD/tests/blas/bin
SHIM=$BUILD/shim

# The same cuDNN / cuBLAS both ways: the torch install's wheels when present,
# else the toolkit's.
LIBS=""
for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib \
         /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib /usr/local/cuda/lib64; do
  [[ -d $d ]] && LIBS=${LIBS:+$LIBS:}$d
done
export LD_LIBRARY_PATH=$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
summary "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
summary "libraries: $LIBS"
summary "native links: $(ldd "$BIN/prog_dnn" | grep -E 'cudnn|cudart' | tr -s ' \t' ' ' | tr '\n' ';')"

timeout 60 "$BIN/prog_dnn" > "$OUT/native1.txt" 2>&1; r1=$?
timeout 60 "$BIN/prog_dnn" > "$OUT/native2.txt" 2>&1; r2=$?
if [[ $(grep -c '^digest ' "$OUT/native1.txt") == 0 ]]; then
  summary "native runs: NO OUTPUT (rc $r1, $r2): $(grep -m1 -E 'FAIL' "$OUT/native1.txt")"
elif diff <(grep '^digest ' "$OUT/native1.txt") <(grep '^digest ' "$OUT/native2.txt") > /dev/null; then
  summary "native runs: identical digests (rc $r1, $r2)"
else
  summary "native runs: DIFFERENT digests (rc $r1, $r2): outputs are not deterministic natively"
fi

make_workdir device-cudnn
sock=$W/cuda.sock
on_exit daemon_stop
daemon_start "$sock" "$OUT/daemon.log" --backend "${BACKEND:-cuda}" --pool 1 --cuda-libs "$LIBS"
SMOLVM_CUDA_SOCKET=$sock LD_LIBRARY_PATH=$SHIM:$LD_LIBRARY_PATH timeout 120 "$BIN/prog_dnn" > "$OUT/shim.txt" 2>&1
rs=$?
summary "shim run: rc $rs $(grep -E '^(PASS|FAIL|skip|ok)' "$OUT/shim.txt" | tr '\n' ' ')"
nd=$(grep -c '^digest ' "$OUT/native1.txt")
if [[ $r1 == 0 && $rs == 0 && $nd -gt 0 ]] &&
   diff <(grep -E '^(digest|cudnn version)' "$OUT/native1.txt") <(grep -E '^(digest|cudnn version)' "$OUT/shim.txt") > /dev/null; then
  summary "cudnn: IDENTICAL ($nd digests and the version, native vs shim)"
  same=1
else
  same=0
  summary "cudnn: DIFFERENT (native rc $r1, shim rc $rs, $nd native digests)"
  diff <(grep -E '^(digest|cudnn version)' "$OUT/native1.txt") <(grep -E '^(digest|cudnn version)' "$OUT/shim.txt") >> "$OUT/summary.txt"
fi
summary "loaded: $(grep -E 'cuDNN .* loaded from|cuBLAS .* from|load NVIDIA libraries' "$OUT/daemon.log" | tr '\n' ' ')"
((same))
