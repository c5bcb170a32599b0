#!/usr/bin/env bash
# Issue 13 item 3 on the H200: torch's cuDNN attention natively and through the
# shims (a bare host process with `smolvm cuda env`'s variables, against a
# fresh `smolvm cuda daemon --cuda-libs <the venv's nvidia/*/lib>`, so the
# worker runs the venv's own cuDNN and cuBLAS), from the repo root with build/
# (or .carry/build from scripts/device-pack.sh) carried:
#   1. tests/blas/bin/prog_sdpa (no torch): cudnn-frontend's backend-API
#      sequence for SDPA (heuristics, notes counted with a null array, knob
#      choices and infos, workspace, plan, execute), natively with the venv's
#      libcudnn and through the shims; every "query" answer and output digest
#      must be identical (the worker's library answers as the native one).
#   2. torch: F.scaled_dot_product_attention under
#      sdpa_kernel(SDPBackend.CUDNN_ATTENTION), bf16, forward + backward,
#      (2, 14, 256, 64) and (2, 28, 256, 128) causal, (2, 14, 256, 64) with an
#      additive mask, and GQA (14 q / 2 kv heads, enable_gqa); natively twice
#      (is native deterministic?) and once through the shims; sha256 of O,
#      dQ, dK, dV per case, compared bit for bit.
# Usage: OUT=DIR scripts/device-sdpa.sh            (about 2 minutes, <= 3)
# Env: PY (default /opt/torch/.venv/bin/python3), BUILD (default build, else
# .carry/build), BACKEND (default cuda; fake: a dry run of the script on a
# machine without a GPU: prog_sdpa through the shims only, then exit 2, since
# the native runs and torch need the H200).
# Exit: 0 everything ran and shim == native wherever native == native;
# 1 setup failed (no build, no python, daemon did not start); 2 BACKEND=fake
# dry run; 3 a run failed or an output differed (sdpa.txt says which).
# Writes to $OUT: sdpa.txt (summary), sdpa-runs.log (every run's output),
# sdpa-daemon.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-sdpa-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
BUILD=${BUILD:-build}
[[ -x $BUILD/smolvm ]] || BUILD=.carry/build
BACKEND=${BACKEND:-cuda}
mkdir -p "$OUT"
SUM=$OUT/sdpa.txt
RUNS=$OUT/sdpa-runs.log
: >"$SUM" && : >"$RUNS"
log() { echo "[sdpa $(date +%T)] $*" | tee -a "$SUM"; }
[[ -x $BUILD/smolvm ]] || { log "no smolvm in build/ or .carry/build: build it (scripts/device-pack.sh)"; exit 1; }
B=$(cd "$BUILD" && pwd)
PROG=$B/tests/blas/bin/prog_sdpa
[[ -x $PROG ]] || { log "no $PROG: build the blas_prog_sdpa target"; exit 1; }
W=$(mktemp -d /tmp/device-sdpa.XXXXXX)
SOCK=$W/cuda.sock
T0=$SECONDS
DAEMON=
cleanup() {
  [[ -n $DAEMON ]] && kill -TERM "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

# The venv's NVIDIA libraries (cuDNN, cuBLAS, cudart): the worker loads these,
# and prog_sdpa natively links them too.
VENV=$(dirname "$(dirname "$PY")")
NVDIRS=
for d in "$VENV"/lib/python3*/site-packages/nvidia/*/lib; do
  [[ -d $d ]] && NVDIRS=${NVDIRS:+$NVDIRS:}$d
done
log "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)"
log "backend $BACKEND; venv libraries: ${NVDIRS:-none found under $VENV}"
if [[ $BACKEND == cuda && -z $NVDIRS ]]; then log "no nvidia/*/lib under $VENV: set PY to the torch venv's python"; exit 1; fi

setsid "$B/smolvm" cuda daemon "$SOCK" --backend "$BACKEND" --pool 1 ${NVDIRS:+--cuda-libs "$NVDIRS"} \
  2>"$OUT/sdpa-daemon.log" &
DAEMON=$!
for _ in $(seq 200); do [[ -S $SOCK.admin ]] && break; sleep 0.05; done
[[ -S $SOCK.admin ]] || { log "the daemon did not start: $(tail -n 3 "$OUT/sdpa-daemon.log" | tr '\n' ' ')"; exit 1; }
ENVLINES=$("$B/smolvm" cuda env --socket "$SOCK") || { log "smolvm cuda env failed"; exit 1; }
log "shim env: $(echo "$ENVLINES" | tr '\n' ' ')"

# run NAME MODE LIMIT_S CMD...: MODE native|shim; output in $W/NAME.MODE.out
run() {
  local name=$1 mode=$2 limit=$3 t=$SECONDS rc
  shift 3
  if [[ $mode == shim ]]; then
    (eval "$ENVLINES"; env PYTHONUNBUFFERED=1 timeout -k 5 "$limit" "$@") >"$W/$name.$mode.out" 2>&1
  else
    env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$NVDIRS" timeout -k 5 "$limit" "$@" >"$W/$name.$mode.out" 2>&1
  fi
  rc=$?
  { echo "===== $name $mode rc=$rc $((SECONDS - t))s"; cat "$W/$name.$mode.out"; } >>"$RUNS"
  log "$name $mode rc=$rc $((SECONDS - t))s $(grep -E '^(PASS|FAIL|RESULT)' "$W/$name.$mode.out" | head -8 | tr '\n' ';' | cut -c1-300)"
  [[ $rc == 0 ]] || log "  last lines: $(tail -n 3 "$W/$name.$mode.out" | tr '\n' ' ' | cut -c1-400)"
  return $rc
}
# same NAME A B PATTERN: are A's and B's lines matching PATTERN identical (and some)?
same() {
  local a b
  a=$(grep -E "$4" "$W/$1.$2.out" 2>/dev/null)
  b=$(grep -E "$4" "$W/$1.$3.out" 2>/dev/null)
  [[ -n $a && $a == "$b" ]]
}
bad=0

# --- 1. prog_sdpa ------------------------------------------------------------
LINES='^(query|digest|ok|skip|PASS)'
run prog shim 30 "$PROG" || bad=1
if [[ $BACKEND != cuda ]]; then
  log "BACKEND=$BACKEND: dry run; prog_sdpa through the shims only, $(grep -c '^query' "$W/prog.shim.out") answers"
  log "NOT RUN: the native prog_sdpa and the torch probes need the H200 (BACKEND=cuda)"
  exit 2
fi
run prog native 30 "$PROG" || bad=1
if same prog native shim "$LINES"; then
  log "prog_sdpa: IDENTICAL native vs shim ($(grep -cE "$LINES" "$W/prog.native.out") lines: answers and digests)"
else
  log "prog_sdpa: DIFFERENT native vs shim"; bad=1
  diff <(grep -E "$LINES" "$W/prog.native.out") <(grep -E "$LINES" "$W/prog.shim.out") | head -20 >>"$SUM"
fi

# --- 2. torch ----------------------------------------------------------------
if [[ ! -x $PY ]]; then log "no python at $PY: torch probe not run"; exit 1; fi
cat >"$W/sdpa.py" <<'PY'
import hashlib, time
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

def sha(t):
    return hashlib.sha256(t.detach().contiguous().view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:16]

cases = [  # name, q shape, kv heads, causal, mask
    ("causal_14x64", (2, 14, 256, 64), 14, True, False),
    ("causal_28x128", (2, 28, 256, 128), 28, True, False),
    ("mask_14x64", (2, 14, 256, 64), 14, False, True),
    ("gqa_14x2x64", (2, 14, 256, 64), 2, True, False),
]
for name, (b, h, s, d), hkv, causal, masked in cases:
    torch.manual_seed(0)
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mask = None
    if masked:
        mask = torch.zeros(b, 1, s, s, device="cuda", dtype=torch.bfloat16)
        mask[:, :, :, s - 32:] = float("-inf")  # padded keys, as a batch with padding has
    try:
        t = time.perf_counter()
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                               enable_gqa=hkv != h)
            o.backward(torch.randn_like(o))
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t) * 1e3
        print(f"RESULT {name} o={sha(o)} dq={sha(q.grad)} dk={sha(k.grad)} dv={sha(v.grad)}", flush=True)
        print(f"TIME {name} first_call_ms={ms:.1f}", flush=True)
    except Exception as e:  # one case's failure is reported, the others still run
        print(f"RESULT {name} ERROR {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
PY
# Each run <= 40 s; the second native run (is native deterministic?) only
# while the whole script stays within 3 minutes.
run torch native 40 "$PY" "$W/sdpa.py" || bad=1
mv "$W/torch.native.out" "$W/torch.native1.out"
run torch shim 40 "$PY" "$W/sdpa.py" || bad=1
if (( SECONDS - T0 < 120 )); then
  run torch native 40 "$PY" "$W/sdpa.py" || bad=1
  mv "$W/torch.native.out" "$W/torch.native2.out"
else
  log "second native run skipped (time budget): native determinism not checked"
  cp "$W/torch.native1.out" "$W/torch.native2.out"
fi
for c in causal_14x64 causal_28x128 mask_14x64 gqa_14x2x64; do
  n1=$(grep -E "^RESULT $c " "$W/torch.native1.out"); n2=$(grep -E "^RESULT $c " "$W/torch.native2.out")
  sh=$(grep -E "^RESULT $c " "$W/torch.shim.out")
  if [[ -z $n1 || $n1 == *ERROR* ]]; then
    log "torch $c: native did not run it (${n1:-no line}); shim: ${sh:-no line}"
  elif [[ $n1 != "$n2" ]]; then
    log "torch $c: native runs differ from each other (not deterministic natively); shim ${sh#RESULT $c }"
    [[ $sh == *ERROR* || -z $sh ]] && bad=1
  elif [[ $n1 == "$sh" ]]; then
    log "torch $c: IDENTICAL native vs shim (${n1#RESULT $c })"
  else
    log "torch $c: DIFFERENT native ${n1#RESULT $c } vs shim ${sh#RESULT $c }"; bad=1
  fi
done

"$B/smolvm" cuda status --socket "$SOCK" >>"$SUM" 2>&1
log "worker libraries: $(grep -E 'cuDNN .* loaded from|load NVIDIA libraries' "$OUT/sdpa-daemon.log" | tr '\n' ' ' | cut -c1-400)"
log "not supported (shim runs): $(cat "$W"/*.shim.out | grep -oE 'smolvm [a-zA-Z]+: [A-Za-z0-9_]+ is not supported' | sort -u | tr '\n' ';')"
log "total $((SECONDS - T0))s; $([[ $bad == 0 ]] && echo OK || echo 'FAILURES above')"
[[ $bad == 0 ]] || exit 3
