#!/usr/bin/env bash
# Small torch programs on the H200, each natively and then through the shims
# on a bare host process (the variables `smolvm cuda env` prints: LD_PRELOAD of
# build/shim's libraries, SMOLVM_CUDA_SOCKET), against a fresh daemon:
#   import   import torch, device count/name, the time it took
#   matmul   fp32 1024x1024 x@x, the sum
#   autocast a bf16-autocast MLP step with AdamW, 3 steps, losses as hex
#   expand   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, growth and shrink, memory_stats
#   maps     which CUDA runtime / driver libraries the process has mapped, with
#            torchvision imported
#   driver   tests/shim/bin/prog_driver (no torch): the driver API, VMM on the
#            real backend, cuGetProcAddress, mixed with runtime calls; natively
#            with the venv's libcudart
# Every run has its own timeout (a hang costs one probe, never the call) and
# PYTHONUNBUFFERED=1. Whole script <= 6 minutes.
#
# Usage: OUT=DIR scripts/device-torch.sh
# Env: PY (default /opt/torch/.venv/bin/python3), BUILD (default build, else
# .carry/build), PROBE_TIMEOUT (seconds, default 40), PROBES (default all),
# BACKEND (default cuda; fake for a dry run of the script itself).
# Writes to $OUT: torch.txt (summary: rc, seconds, result lines, native vs
# shim), torch-runs.log (every run's stdout+stderr), torch-daemon.log,
# torch-not-supported.txt (the first not-supported names each shim run hit).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${OUT:-$PWD/device-torch-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
find_build
PROBE_TIMEOUT=${PROBE_TIMEOUT:-40}
PROBES=${PROBES:-driver import matmul autocast expand maps}
BUDGET_S=270
mkdir -p "$OUT"
B=$BUILD
make_workdir device-torch
SOCK=$W/cuda.sock
T0=$SECONDS
SUM=$OUT/torch.txt
RUNS=$OUT/torch-runs.log
NS=$OUT/torch-not-supported.txt
: >"$SUM" && : >"$RUNS" && : >"$NS"
LOG_TAG=torch LOG_FILE=$SUM

[[ -x $PY ]] || { log "no python at $PY"; exit 1; }
[[ -f $B/shim/libcuda.so.1 ]] || { log "no driver shim at $B/shim/libcuda.so.1"; exit 1; }

# --- the probes -------------------------------------------------------------
cat >"$W/import.py" <<'PY'
import time
t = time.perf_counter()
import torch
dt = time.perf_counter() - t
print("RESULT", torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count(),
      torch.cuda.get_device_name(0))
print(f"TIME import_torch_s={dt:.2f}")
PY
cat >"$W/matmul.py" <<'PY'
import torch
torch.manual_seed(0)
x = torch.randn(1024, 1024, device="cuda")
y = x @ x
torch.cuda.synchronize()
print("RESULT sum", (y).sum().item(), "first", y[0, :4].tolist())
PY
cat >"$W/autocast.py" <<'PY'
import torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(64, 256, device="cuda")
t = torch.randn(64, 256, device="cuda")
for step in range(3):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(m(x).float(), t)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("RESULT step", step, float(loss).hex())
PY
cat >"$W/expand.py" <<'PY'
import torch
torch.manual_seed(0)
keep = []
for mib in (1, 3, 17, 64, 130, 7):
    a = torch.full((mib << 18,), float(mib), device="cuda")
    keep.append(a)
total = sum(float(a.sum().item()) for a in keep)
del keep[2:4]
b = torch.randn(50 << 18, device="cuda")
torch.cuda.synchronize()
s = torch.cuda.memory_stats()
print("RESULT total", total, "b", float(b.abs().sum().item()) > 0)
print("STATS segments", s.get("segment.all.current"), "reserved_mib", s.get("reserved_bytes.all.current", 0) >> 20)
torch.cuda.empty_cache()
print("STATS after_empty_cache_reserved_mib", torch.cuda.memory_stats().get("reserved_bytes.all.current", 0) >> 20)
PY
cat >"$W/maps.py" <<'PY'
import torch
try:
    import torchvision  # a bundled runtime under another soname would show up below
    print("RESULT torchvision", torchvision.__version__)
except Exception as e:
    print("NOTE no torchvision:", type(e).__name__)
torch.zeros(1, device="cuda")
libs = set()
for line in open("/proc/self/maps"):
    p = line.split()[-1] if len(line.split()) >= 6 else ""
    if any(k in p for k in ("libcudart", "libcuda.so", "libcublas", "libnvidia-ml", "libcudnn")):
        libs.add(p)
for p in sorted(libs):
    print("MAPPED", p)
PY

# --- the daemon and the shim environment -------------------------------------
# The worker runs the cuBLAS of the torch install under test (docs/shim.md).
VENV=$(dirname "$(dirname "$PY")")
NVLIBS=$(find "$VENV"/lib*/python3*/site-packages/nvidia \( -name 'libcublasLt.so.13' -o -name 'libcublas.so.13' \
  -o -name 'libcudart.so.13' \) 2>/dev/null)
LT=$(grep -m1 'libcublasLt.so.13$' <<<"$NVLIBS")
BL=$(grep -m1 'libcublas.so.13$' <<<"$NVLIBS")
CUDART_DIR=$(dirname "$(grep -m1 'libcudart.so.13$' <<<"$NVLIBS")")
if [[ -n $LT && -n $BL ]]; then export SMOLVM_LIBCUBLASLT=$LT SMOLVM_LIBCUBLAS=$BL; fi
log "worker cuBLAS: ${SMOLVM_LIBCUBLAS:-default search} / ${SMOLVM_LIBCUBLASLT:-default search}"
on_exit daemon_stop
daemon_start "$SOCK" "$OUT/torch-daemon.log" --backend "${BACKEND:-cuda}" --pool 1
ENVLINES=$("$B/smolvm" cuda env --socket "$SOCK") || { log "smolvm cuda env failed"; exit 1; }
log "shim env: $(echo "$ENVLINES" | tr '\n' ' ')"
mem0=$(smi_used)
log "memory.used at start: ${mem0:-?} MiB"

# run NAME MODE: MODE native|shim
run() {
  local name=$1 mode=$2 extra=() cmd=()
  cmd=("$PY" "$W/$name.py")
  [[ $name == expand ]] && extra=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
  if [[ $name == driver ]]; then
    cmd=("$B/tests/shim/bin/prog_driver")
    [[ $mode == native ]] && extra=(LD_LIBRARY_PATH=$CUDART_DIR)
  fi
  local out=$W/$name.$mode.out t=$SECONDS rc
  if [[ $mode == shim ]]; then
    (eval "$ENVLINES"; env PYTHONUNBUFFERED=1 "${extra[@]}" timeout -k 5 "$PROBE_TIMEOUT" "${cmd[@]}") >"$out" 2>&1
  else
    env PYTHONUNBUFFERED=1 "${extra[@]}" timeout -k 5 "$PROBE_TIMEOUT" "${cmd[@]}" >"$out" 2>&1
  fi
  rc=$?
  { echo "===== $name $mode rc=$rc $((SECONDS - t))s"; cat "$out"; } >>"$RUNS"
  log "$name $mode rc=$rc $((SECONDS - t))s $(grep -E '^(RESULT|TIME|STATS|MAPPED|PASS)' "$out" | tr '\n' ';' | cut -c1-400)"
  [[ $rc == 0 ]] || log "  last lines: $(tail -n 3 "$out" | tr '\n' ' ' | cut -c1-400)"
  if [[ $mode == shim ]]; then
    grep -oE 'smolvm [a-zA-Z]+: [A-Za-z0-9_]+( with [^(]*)? is not supported' "$out" | sort -u | sed "s/^/$name: /" >>"$NS"
  fi
}
for p in $PROBES; do
  if (( SECONDS - T0 > BUDGET_S )); then log "budget spent: skipping $p and later probes"; break; fi
  run "$p" native
  run "$p" shim
  a=$(grep -E '^(RESULT|PASS)' "$W/$p.native.out" 2>/dev/null); b=$(grep -E '^(RESULT|PASS)' "$W/$p.shim.out" 2>/dev/null)
  if [[ -n $a && $a == "$b" ]]; then log "$p: native and shim RESULT lines identical"
  else log "$p: RESULT lines DIFFER or missing"; fi
done

"$B/smolvm" cuda status --socket "$SOCK" >>"$SUM" 2>&1
daemon_stop
sleep 1
log "daemon stopped; memory.used $(smi_used) MiB (start ${mem0:-?} MiB); total $((SECONDS - T0))s"
log "not-supported names hit: $(cut -d' ' -f2- "$NS" | sort -u | tr '\n' ';' | cut -c1-600)"
