#!/usr/bin/env bash
# torch.compile (Inductor + Triton) natively and through the shims on a bare
# host process (the variables `smolvm cuda env` prints, against a fresh daemon
# running the torch install's cuBLAS/cuBLASLt/cuDNN), issue 13 must-show 4:
#   triton-prog  tests/shim/bin/prog_triton (no torch): the launchers' driver
#            calls on a plain cubin and launches with attributes (clusters,
#            cooperative, programmatic serialization) on the real backend
#   probe    scripts/torch-suite/probes.py torch_compile (what the suite runs)
#   compile  scripts/torch-suite/compile.py: torch.compile of a pointwise
#            function and of a matmul+relu (Inductor's static launcher:
#            cuModuleLoad of Triton's cubin, cuLaunchKernel), and a raw
#            @triton.jit kernel (Triton's own launcher: cuModuleLoadData of
#            the cubin bytes, cuPointerGetAttribute, cuLaunchKernelEx); each
#            output's SHA-256, which must be the same natively and through
#            the shims (bit for bit)
# Each run has a fresh Inductor cache (so every run compiles: the compile-time
# driver queries go through the shims too); Triton's cache (its cuda_utils
# module, built once natively) is shared. Inductor compiles in the process
# (TORCHINDUCTOR_COMPILE_THREADS=1) for the compile runs: one session each.
# Through the shims, the shim's stderr lines ("smolvm ...: X is not
# supported") are collected: whatever still fails names itself there.
#
# Estimate on the H200: the probe took 13.8 s natively (suite, 2026-12-03);
# four torch runs of ~15-25 s each, two prog_triton runs of ~1 s and the
# daemon's start: about 1.5 minutes, each
# run capped by RUN_TIMEOUT (default 60 s), the whole by BUDGET_S (150 s).
#
# Usage: OUT=DIR scripts/device-torch-compile.sh
# Env: PY (default /opt/torch/.venv/bin/python3), BUILD (default build, else
# .carry/build), RUN_TIMEOUT, BUDGET_S, BACKEND (default cuda; fake rehearses
# the script: the runs then fail quickly, saying so).
# Writes to $OUT (three files): torch-compile.txt (summary: per run rc,
# seconds, result lines, the shim's not-supported lines, native vs shim),
# torch-compile-runs.log (every run's stdout+stderr), torch-compile-daemon.log.
# Exit: 0 when every run passed and the outputs agree; 1 otherwise or on a
# setup failure (no python, no shims, the daemon did not start).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${OUT:-$PWD/device-torch-compile-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
find_build
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
BUDGET_S=${BUDGET_S:-150}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B=$BUILD
make_workdir device-torch-compile
SOCK=$W/cuda.sock
SUM=$OUT/torch-compile.txt
RUNS=$OUT/torch-compile-runs.log
: >"$SUM" && : >"$RUNS"
LOG_TAG=torch-compile LOG_FILE=$SUM
T0=$SECONDS

[[ -x $PY ]] || { log "no python at $PY (set PY)"; exit 1; }
[[ -f $B/shim/libcuda.so.1 && -f $B/shim/libcudart.so.13 ]] || { log "no shims at $B/shim"; exit 1; }

SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
LIBS=""
for d in "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cudnn/lib"; do [[ -d $d ]] && LIBS=${LIBS:+$LIBS:}$d; done
log "python $PY; worker libraries: ${LIBS:-default search}; build $B"
on_exit daemon_stop
daemon_start "$SOCK" "$OUT/torch-compile-daemon.log" --backend "${BACKEND:-cuda}" --pool 1 \
  ${LIBS:+--cuda-libs "$LIBS"} || { log "daemon did not start: $(tail -n 3 "$OUT/torch-compile-daemon.log" | tr '\n' ' ')"; exit 1; }
ENVLINES=$("$B/smolvm" cuda env --socket "$SOCK") || { log "smolvm cuda env failed"; exit 1; }
log "shim env: $(echo "$ENVLINES" | tr '\n' ' ')"
mem0=$(smi_used)
export TRITON_CACHE_DIR=$W/triton-cache

failed=0
# run NAME MODE COMMAND...
run() {
  local name=$1 mode=$2 t=$SECONDS rc
  shift 2
  local out=$W/$name-$mode.out err=$W/$name-$mode.err
  if (( SECONDS - T0 + 25 > BUDGET_S )); then
    log "$name $mode: skipped (budget: $((SECONDS - T0)) s of $BUDGET_S s spent)"
    failed=1
    return
  fi
  mkdir -p "$W/inductor-$name-$mode"
  local envs=(PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR="$W/inductor-$name-$mode")
  [[ $name == compile ]] && envs+=(TORCHINDUCTOR_COMPILE_THREADS=1)
  if [[ $mode == shim ]]; then
    (eval "$ENVLINES"; env "${envs[@]}" timeout -k 5 "$RUN_TIMEOUT" "$@") >"$out" 2>"$err"
  else
    env "${envs[@]}" timeout -k 5 "$RUN_TIMEOUT" "$@" >"$out" 2>"$err"
  fi
  rc=$?
  { echo "===== $name $mode rc=$rc $((SECONDS - t))s"; cat "$out"; echo "----- stderr"; cat "$err"; } >>"$RUNS"
  log "$name $mode rc=$rc $((SECONDS - t))s: $(grep -E '^(PROBE|RESULT|ERROR|PASS)' "$out" | tr '\n' ';' | cut -c1-500)"
  [[ $name == probe ]] && ! grep -q '^PROBE torch_compile ok' "$out" && failed=1
  if [[ $mode == shim ]]; then
    local named
    named=$(grep -E '^smolvm [a-zA-Z]+: ' "$err" | sort -u | head -20 | tr '\n' ';')
    log "$name shim: the shim's stderr lines: ${named:-none}"
  fi
  [[ $rc == 0 ]] || { failed=1; log "$name $mode FAILED: $(tail -n 4 "$err" | tr '\n' ' ' | cut -c1-600)"; }
}

# tests/shim/bin/prog_triton (no torch): Triton's and Inductor's launcher
# calls on a plain sm_90 cubin, launch attributes (clusters, cooperative,
# programmatic serialization) run by the worker's cuLaunchKernelEx.
PROG=$B/tests/shim/bin/prog_triton
if [[ -x $PROG ]]; then
  run triton-prog native env LD_LIBRARY_PATH="$LIBS" "$PROG"
  run triton-prog shim "$PROG"
else
  log "no $PROG (build the tests): skipped"
fi
run compile native "$PY" scripts/torch-suite/compile.py
run compile shim "$PY" scripts/torch-suite/compile.py
run probe native "$PY" scripts/torch-suite/probes.py torch_compile
run probe shim "$PY" scripts/torch-suite/probes.py torch_compile

a=$(grep -E '^RESULT' "$W/compile-native.out" 2>/dev/null) b=$(grep -E '^RESULT' "$W/compile-shim.out" 2>/dev/null)
if [[ -n $a && $a == "$b" ]]; then
  log "compile: native and shim outputs bit-identical ($(echo "$a" | wc -l) results)"
else
  failed=1
  log "compile: outputs DIFFER or missing: native [$(echo "$a" | tr '\n' ';')] shim [$(echo "$b" | tr '\n' ';')]"
fi
ops=$("$B/smolvm" cuda status --socket "$SOCK" --json 2>/dev/null | "$PY" -c '
import json, sys
t = json.load(sys.stdin).get("ops_total", {})
print(", ".join(f"{k} {t[k]}" for k in ("ModuleLoad", "ModuleGetFunction", "FuncSetAttribute", "LaunchKernel", "LaunchKernelEx") if k in t))' 2>/dev/null)
log "daemon ops: ${ops:-?}"
daemon_stop
mem1=$(smi_used)
log "memory.used at start ${mem0:-?} MiB, after the daemon stopped ${mem1:-?} MiB; $((SECONDS - T0)) s; $([[ $failed == 0 ]] && echo PASS || echo FAIL)"
exit "$failed"
