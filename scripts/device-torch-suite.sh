#!/usr/bin/env bash
# The torch suite (issue 13, must-show 2): the same unmodified program
# (scripts/torch-suite/suite.py: fp32/TF32/bf16/fp16 matmuls, a bf16 autocast
# training loop with AdamW and dropout, SDPA on each backend -- default,
# cuDNN, flash, efficient, math, flash with dropout -- forward and backward,
# dropout, non_blocking copies from pinned memory, two streams and events,
# torch.cuda.memory_stats, torchvision imported) natively and in a --cuda
# machine given torch's venv read-only, alternating, with expandable segments
# off and on:  native 1, machine 1, native 2, machine 2  per allocator mode.
#
# Checks (each a PASS or FAIL line in suite.txt):
#   - two native runs: which results are bit-identical (reported first);
#   - machine vs native: bit-identical wherever two native runs are; the max
#     abs difference elsewhere (with the native-vs-native one beside it);
#   - no ERROR in any run; the RESULT lines equal;
#   - in the guest, /proc/self/maps maps no libcudart/libcuda/libcublas(Lt)/
#     libcudnn/libnvidia-ml but ours (/run/smolvm/lib), and the shims name no
#     copy mapped beside them (under gVisor a copy not taken for the shim is
#     a second instance of it: shim/loader_audit.cc);
#   - the daemon's op counters (smolvm cuda status --ops) show, per machine
#     run, cuDNN executes, GEMMs and launches, and VMM calls with expandable
#     segments on;
#   - import torch time natively and in the machine (medians);
#   - GPU memory back to its start after the daemon stopped;
#   - in the last run of each kind, what is not supported through the shims
#     (CUDA graphs, torch.compile, NCCL): each probe's outcome and time, to
#     show it fails at once with a named error instead of hanging;
#   - what torch's libraries import (nm) against tests/testdata/torch-2.11-imports
#     and against the shims' exports;
#   - tests/shim's prog_driver (driver API, VMM, module globals, packed launch
#     parameters; no torch) natively and in a --cuda machine.
#
# Usage (repository root, root, build/ or .carry/build carried):
#   OUT=DIR scripts/device-torch-suite.sh
# Env: PY (default /opt/torch/.venv/bin/python3), CPUS (per machine, default
#      half the host's), RUN_TIMEOUT (s per run,
#      default 150), DEADLINE (s for the whole script, default 420), MODES
#      (default "off on": expandable segments), BACKEND (cuda; fake: no torch
#      needed, rehearses the machine, op-counter and record plumbing with
#      tests/shim's prog_driver in a --cuda machine on the fake backend),
#      ISOLATION (the machines' --isolation: sandbox, the default, or gvisor:
#      issue 35's must-show 2, with SMOLVM_RUNSC naming a carried runsc),
#      RECORD_KIND (the record's kind, default torch-suite).
# Writes to $OUT (5 files): suite.txt (summary), suite-runs.log (every run's
# output), suite-daemon.log, suite-imports.txt, records/torch-suite_<UTC>.json.
# Exit: 0 every check passed; 1 a check failed; 2 cannot run here (no root,
# no build, no torch at $PY).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/device-torch-suite-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PY=${PY:-/opt/torch/.venv/bin/python3}
BACKEND=${BACKEND:-cuda}
RUN_TIMEOUT=${RUN_TIMEOUT:-150}
DEADLINE=${DEADLINE:-420}
MODES=${MODES:-off on}
ISOLATION=${ISOLATION:-sandbox}
RECORD_KIND=${RECORD_KIND:-torch-suite}
CPUS=${CPUS:-$(( $(nproc) > 1 ? $(nproc) / 2 : 1 ))}
BUILD=$ROOT/build
[[ -x $BUILD/smolvm ]] || BUILD=$ROOT/.carry/build
SMOLVM=$BUILD/smolvm
SUM=$OUT/suite.txt RUNS=$OUT/suite-runs.log IMPORTS=$OUT/suite-imports.txt
: >"$SUM" && : >"$RUNS" && : >"$IMPORTS"
T_START=$(date +%s)
FAILS=0
log() { echo "[torch-suite $(date +%T)] $*" | tee -a "$SUM"; }
fail() { FAILS=$((FAILS + 1)); log "FAIL: $*"; }
pass() { log "PASS: $*"; }
left() { echo $((DEADLINE - ($(date +%s) - T_START))); }
smi_used() {
  [[ $BACKEND == fake ]] && { echo 0; return; }
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1
}
pyj() { python3 -c "import json,sys; $1" "${@:2}"; }

log "build=$BUILD backend=$BACKEND py=$PY modes=$MODES isolation=$ISOLATION out=$OUT"
[[ $(id -u) == 0 ]] || { log "cannot run: --cuda machines need root"; exit 2; }
[[ -x $SMOLVM && -f $BUILD/shim/libcudart.so.13 && -f $BUILD/shim/libcudnn.so.9 ]] ||
  { log "cannot run: no built tree with smolvm and shim/ at $BUILD (carry build/ or .carry/build)"; exit 2; }
TORCH=1
if ! "$PY" -c 'import torch, torchvision' >/dev/null 2>&1; then
  TORCH=0
  if [[ $BACKEND != fake ]]; then
    log "cannot run: $PY cannot import torch and torchvision (set PY to a venv's python; BACKEND=fake rehearses without torch)"
    exit 2
  fi
  log "no torch at $PY: rehearsal on the fake backend with tests/shim/bin/prog_driver in place of suite.py"
  [[ -x $BUILD/tests/shim/bin/prog_driver ]] || { log "cannot run: no $BUILD/tests/shim/bin/prog_driver"; exit 2; }
fi

W=$(mktemp -d /tmp/device-torch-suite.XXXXXX)
chmod 0755 "$W"
export SMOLVM_HOME=$W/home SMOLVM_CGROUP_PARENT=smolvm-suite-$$ SMOLVM_CUDA_BACKEND=$BACKEND SMOLVM_CUDA_POOL=1
unset SMOLVM_CUDA_SOCKET SMOLVM_SHIM_DIR
mkdir -p "$SMOLVM_HOME" "$W/prog" "$W/runs"
MACHINES=()
cleanup() {
  for m in "${MACHINES[@]}"; do "$SMOLVM" machine rm --name "$m" --force --grace 0 >/dev/null 2>&1; done
  cp -f "$SMOLVM_HOME/cuda/daemon.log" "$OUT/suite-daemon.log" 2>/dev/null
  "$SMOLVM" cuda shutdown --grace 10 >/dev/null 2>&1
  for h in /sys/fs/cgroup/ /sys/fs/cgroup/*/; do rmdir "$h$SMOLVM_CGROUP_PARENT" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT
mem0=$(smi_used)
log "GPU memory.used at start: ${mem0:-?} MiB"

# --- what the guest needs: the venv (and the Python it was made from) -------
VENV=$(dirname "$(dirname "$PY")")
VOLS=()
if ((TORCH)); then
  cp scripts/torch-suite/suite.py scripts/torch-suite/probes.py "$W/prog/"
  VOLS=(-v "$VENV:$VENV:ro")
  # A venv's python is a link to the interpreter it was made from: when that
  # lives outside the host directories a machine sees, bind its prefix too.
  real=$(readlink -f "$PY")
  case $real in
    /usr/* | /bin/* | "$VENV"/*) ;;
    *) prefix=$(dirname "$(dirname "$real")"); VOLS+=(-v "$prefix:$prefix:ro"); log "interpreter prefix bound: $prefix" ;;
  esac
  SITE=$("$PY" -c 'import site; print(site.getsitepackages()[0])')
  # The worker runs the venv's own cuBLAS/cuBLASLt/cuDNN (docs/shim.md).
  export SMOLVM_CUDA_LIBS=$SITE/nvidia/cu13/lib:$SITE/nvidia/cudnn/lib
  log "worker libraries: $SMOLVM_CUDA_LIBS"
  CMD=("$PY" /suite-py/suite.py /out)
else
  VOLS=(-v "$BUILD/tests/shim/bin:/suite:ro")
  CMD=(/suite/prog_driver)
fi

ops_total() { "$SMOLVM" cuda status --json 2>/dev/null | pyj 'print(json.dumps(json.load(sys.stdin).get("ops_total", {})))' 2>/dev/null || echo '{}'; }

# The not-supported probes (CUDA graphs, torch.compile, NCCL) in the last run
# of each kind only: torch.compile's first compile costs tens of seconds, and
# a probe that hung would cost only the end of the call.
probes() { [[ $1 == *-${MODES##* }-2 ]] && echo 1 || echo 0; }

# run_native NAME ALLOC / run_machine NAME ALLOC: output in $W/runs/NAME.out,
# tensors in $W/runs/NAME/.
run_native() {
  local name=$1 alloc=$2 t=$SECONDS
  mkdir -p "$W/runs/$name"
  env PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:$alloc SUITE_PROBES=$(probes "$name") \
    timeout -k 5 "$RUN_TIMEOUT" "$PY" scripts/torch-suite/suite.py "$W/runs/$name" >"$W/runs/$name.out" 2>&1
  local rc=$?
  { echo "===== $name (native, expandable_segments:$alloc) rc=$rc $((SECONDS - t))s"; cat "$W/runs/$name.out"; } >>"$RUNS"
  log "$name native rc=$rc $((SECONDS - t))s $(grep -E '^(TIME|DONE)' "$W/runs/$name.out" | tr '\n' ' ')"
}
run_machine() {
  local name=$1 alloc=$2 t=$SECONDS before after state=running
  mkdir -p "$W/runs/$name" && chmod 0777 "$W/runs/$name"
  before=$(ops_total)
  MACHINES+=("$name")
  "$SMOLVM" machine create --name "$name" --isolation "$ISOLATION" --cuda --cpus "$CPUS" "${VOLS[@]}" -v "$W/prog:/suite-py:ro" \
    -v "$W/runs/$name:/out" -e PYTHONUNBUFFERED=1 -e PYTORCH_CUDA_ALLOC_CONF=expandable_segments:$alloc \
    -e SUITE_PROBES="$(probes "$name")" \
    -- "${CMD[@]}" >"$W/$name.cli.log" 2>&1 &&
    "$SMOLVM" machine start --name "$name" >>"$W/$name.cli.log" 2>&1 ||
    { fail "$name: machine create/start: $(tail -n 2 "$W/$name.cli.log" | tr '\n' ' ')"; return 1; }
  while ((SECONDS - t < RUN_TIMEOUT)); do
    state=$("$SMOLVM" machine list --json | pyj 'print([m["state"] for m in json.load(sys.stdin) if m["name"] == sys.argv[1]][0])' "$name" 2>/dev/null)
    [[ $state == running* ]] || break
    sleep 0.3
  done
  "$SMOLVM" machine logs --name "$name" >"$W/runs/$name.out" 2>&1
  [[ $state == running* ]] && echo "TIMEOUT after ${RUN_TIMEOUT}s" >>"$W/runs/$name.out"
  "$SMOLVM" machine rm --name "$name" --force --grace 2 >>"$W/cli.log" 2>&1
  # The session's final op counts reach the daemon as its worker exits.
  for _ in $(seq 50); do
    "$SMOLVM" cuda status --json 2>/dev/null | pyj 'sys.exit(any(s.get("machine") == sys.argv[1] for s in json.load(sys.stdin)["sessions"]))' "$name" && break
    sleep 0.2
  done
  after=$(ops_total)
  pyj 'b, a = json.loads(sys.argv[1]), json.loads(sys.argv[2]); print(json.dumps({k: v - b.get(k, 0) for k, v in a.items() if v != b.get(k, 0)}))' \
    "$before" "$after" >"$W/runs/$name.ops.json"
  { echo "===== $name (--cuda machine, expandable_segments:$alloc) state=$state $((SECONDS - t))s"; cat "$W/runs/$name.out";
    echo "ops: $(cat "$W/runs/$name.ops.json")"; } >>"$RUNS"
  log "$name machine state=$state $((SECONDS - t))s $(grep -E '^(TIME|DONE|PASS)' "$W/runs/$name.out" | tr '\n' ' ')"
}

# --- the runs, alternating ------------------------------------------------------
RAN=()
for mode in $MODES; do
  alloc=$([[ $mode == on ]] && echo True || echo False)
  for i in 1 2; do
    if (($(left) < 2 * RUN_TIMEOUT / 3)); then log "deadline near: skipping the rest of the runs"; break 2; fi
    ((TORCH)) && run_native "native-$mode-$i" "$alloc" && RAN+=("native-$mode-$i")
    run_machine "machine-$mode-$i" "$alloc" && RAN+=("machine-$mode-$i")
  done
done

# prog_driver (no torch: the driver API, VMM, module globals, cuLaunchKernel's
# packed parameters) natively on the venv's cudart and in a --cuda machine.
if ((TORCH)) && [[ -x $BUILD/tests/shim/bin/prog_driver ]] && (($(left) > 60)); then
  t=$SECONDS
  env LD_LIBRARY_PATH="$SITE/nvidia/cu13/lib" timeout -k 5 60 "$BUILD/tests/shim/bin/prog_driver" >"$W/runs/driver-native.out" 2>&1
  { echo "===== driver-native rc=$? $((SECONDS - t))s"; cat "$W/runs/driver-native.out"; } >>"$RUNS"
  saved_vols=("${VOLS[@]}") saved_cmd=("${CMD[@]}")
  VOLS=(-v "$BUILD/tests/shim/bin:/suite:ro") CMD=(/suite/prog_driver)
  run_machine driver-machine False
  VOLS=("${saved_vols[@]}") CMD=("${saved_cmd[@]}")
  for d in driver-native driver-machine; do
    grep -q '^PASS driver' "$W/runs/$d.out" && pass "$d: prog_driver passed" ||
      fail "$d: prog_driver: $(tail -n 2 "$W/runs/$d.out" | tr '\n' ' ' | cut -c1-400)"
  done
fi

# --- checks ---------------------------------------------------------------------
REPLACED='libcudart|libcuda\.so|libcublas|libcudnn|libnvidia-ml'
for name in "${RAN[@]}"; do
  o=$W/runs/$name.out
  if ((TORCH)); then
    grep -q '^DONE errors=0' "$o" && pass "$name: every part ran" ||
      fail "$name: $(grep -cE '^ERROR' "$o") part(s) failed: $(grep -E '^(ERROR|TIMEOUT)' "$o" | head -3 | tr '\n' ' ' | cut -c1-500)"
  else
    grep -q '^PASS driver' "$o" && pass "$name: prog_driver passed" || fail "$name: prog_driver: $(tail -n 2 "$o" | tr '\n' ' ')"
  fi
  grep -E '^PROBE' "$o" | sed "s/^/$name: /" | while read -r l; do log "$l"; done
  if [[ $name == machine-* ]]; then
    foreign=$(grep -E '^MAPPED' "$o" | awk '{print $2}' | grep -E "$REPLACED" | grep -v '^/run/smolvm/lib/' | tr '\n' ' ')
    ours=$(grep -cE "^MAPPED /run/smolvm/lib/" "$o")
    ((TORCH && ours == 0)) && foreign="nothing of ours (no MAPPED lines: the program did not get that far)"
    # A second instance of a shim (a copy the loader did not take for it)
    # shows as a covered path above; the shims name one too, at first use.
    beside=$(grep -cE '^smolvm cuda: .* is mapped beside the shims' "$o")
    ((beside > 0)) && foreign+="(the shims name $beside copy(ies) mapped beside them: $(grep -E '^smolvm cuda: .* is mapped beside the shims' "$o" | awk '{print $3}' | sort -u | tr '\n' ' ' | cut -c1-400))"
    [[ -z $foreign ]] && pass "$name: the guest maps no NVIDIA runtime/driver/cuBLAS/cuDNN but ours ($ours of ours mapped)" ||
      fail "$name: the guest maps $foreign"
    ops=$(cat "$W/runs/$name.ops.json")
    log "$name ops: $ops"
    want=(LaunchKernel)
    ((TORCH)) && want+=(DnnExecute BlasGemm)
    [[ $name == *-on-* || $TORCH == 0 ]] && want+=(VmmReserve VmmMap)
    for k in "${want[@]}"; do
      n=$(pyj 'print(json.loads(sys.argv[1]).get(sys.argv[2], 0))' "$ops" "$k")
      ((n > 0)) && pass "$name: $k remoted ($n)" || fail "$name: no $k went through the daemon"
    done
  fi
done
if ((TORCH)); then
  COMPARE=$W/compare.jsonl
  : >"$COMPARE"
  for mode in $MODES; do
    n1=native-$mode-1 n2=native-$mode-2
    [[ -f $W/runs/$n1/tensors.pt && -f $W/runs/$n2/tensors.pt ]] || { fail "$mode: no two native runs to compare"; continue; }
    nn=$("$PY" scripts/torch-suite/compare.py "$W/runs/$n1" "$W/runs/$n2")
    echo "{\"mode\": \"$mode\", \"a\": \"$n1\", \"b\": \"$n2\", \"cmp\": $nn}" >>"$COMPARE"
    log "$mode: native vs native: $(pyj 'd=json.loads(sys.argv[1]); print(len(d["same"]), "identical;", "differ:", d["differ"] or "none")' "$nn")"
    for m in machine-$mode-1 machine-$mode-2; do
      [[ -f $W/runs/$m/tensors.pt ]] || { fail "$m: no tensors saved"; continue; }
      mn=$("$PY" scripts/torch-suite/compare.py "$W/runs/$n1" "$W/runs/$m")
      echo "{\"mode\": \"$mode\", \"a\": \"$n1\", \"b\": \"$m\", \"cmp\": $mn}" >>"$COMPARE"
      verdict=$(pyj '
nn, mn = json.loads(sys.argv[1]), json.loads(sys.argv[2])
broken = [k for k in nn["same"] if k not in mn["same"]]
other = {k: (mn["differ"].get(k, 0.0), v) for k, v in nn["differ"].items()}
print("FAIL" if broken or mn["missing"] else "PASS",
      "bit-identical to native:", len(mn["same"]), "of", len(nn["same"]) + len(nn["differ"]),
      "| differ where native runs agree:", {k: mn["differ"].get(k) for k in broken} or "none",
      "| not deterministic natively (machine max abs diff, native-vs-native):", other or "none",
      "| missing:", mn["missing"] or "none")' "$nn" "$mn")
      [[ $verdict == PASS* ]] && pass "$m vs $n1: ${verdict#PASS }" || fail "$m vs $n1: ${verdict#FAIL }"
    done
    for m in machine-$mode-1; do
      a=$(grep -E '^RESULT' "$W/runs/$n1.out") b=$(grep -E '^RESULT' "$W/runs/$m.out" 2>/dev/null)
      [[ -n $a && $a == "$b" ]] && pass "$m: RESULT lines identical to $n1" || fail "$m: RESULT lines differ from $n1"
      diff <(grep -E '^STATS' "$W/runs/$n1.out") <(grep -E '^STATS' "$W/runs/$m.out") >/dev/null &&
        log "$m: allocator STATS identical to $n1" || log "$m: allocator STATS differ: $(diff <(grep -E '^STATS' "$W/runs/$n1.out") <(grep -E '^STATS' "$W/runs/$m.out") | grep '^[<>]' | tr '\n' ' ')"
    done
  done
  med() { sort -n | awk '{a[NR]=$1} END {print NR ? a[int((NR + 1) / 2)] : "?"}'; }
  tn=$(cat "$W"/runs/native-*.out | sed -n 's/^TIME import_torch_s=//p' | med)
  tm=$(cat "$W"/runs/machine-*.out | sed -n 's/^TIME import_torch_s=//p' | med)
  log "import torch (+ torchvision): native median ${tn}s, in the machine median ${tm}s (ratio $(pyj 'print(round(float(sys.argv[2]) / float(sys.argv[1]), 2))' "$tn" "$tm" 2>/dev/null || echo ?))"
  log "native maps (for reference): $(grep -hE '^MAPPED' "$W"/runs/native-off-1.out 2>/dev/null | awk '{print $2}' | grep -E "$REPLACED" | tr '\n' ' ' | cut -c1-600)"

  # What torch's libraries import, against the committed lists and our exports.
  TLIB=$SITE/torch/lib
  mkdir -p "$W/imports"
  for lib in "$TLIB/libtorch_cuda.so" "$TLIB/libc10_cuda.so" "$TLIB/libtorch_python.so" "$SITE/torchvision/_C.so"; do
    [[ -f $lib ]] || continue
    nm -D --undefined-only "$lib" | awk '$1 == "U" {print $2}' | sort >"$W/imports/$(basename "$lib").txt"
    { echo "== $(basename "$lib") vs tests/testdata/torch-2.11-imports"; diff "tests/testdata/torch-2.11-imports/$(basename "$lib").txt" \
        "$W/imports/$(basename "$lib").txt" 2>&1 | head -40; } >>"$IMPORTS"
  done
  if r=$(tests/shim/check_torch_imports.sh "$BUILD/shim" "$W/imports" 2>&1); then pass "imports: $r"
  else fail "imports: $(echo "$r" | tail -n 5 | tr '\n' ' ')"; fi
  echo "$r" >>"$IMPORTS"
fi

# --- the daemon stops; the GPU is back at its start ----------------------------
"$SMOLVM" cuda status --ops >>"$SUM" 2>&1
cp -f "$SMOLVM_HOME/cuda/daemon.log" "$OUT/suite-daemon.log" 2>/dev/null
"$SMOLVM" cuda shutdown --grace 10 >>"$W/cli.log" 2>&1
sleep 1
mem1=$(smi_used)
if [[ -n $mem0 && -n $mem1 ]] && ((mem1 <= mem0 + 16)); then pass "GPU memory back to its start: ${mem1} MiB (start ${mem0} MiB)"
else fail "GPU memory ${mem1:-?} MiB after the daemon stopped (start ${mem0:-?} MiB)"; fi

# --- the record -------------------------------------------------------------------
summary=$(pyj 'f = lambda v: float(v) if v not in ("", "?") else None
print(json.dumps({"checks_failed": int(sys.argv[1]), "runs": sys.argv[2].split(), "backend": sys.argv[3],
                  "import_torch_native_s": f(sys.argv[4]), "import_torch_machine_s": f(sys.argv[5]),
                  "isolation": sys.argv[6], "workload": "torch-suite"}))' \
  "$FAILS" "${RAN[*]}" "$BACKEND" "${tn:-}" "${tm:-}" "$ISOLATION")
samples=()
for name in "${RAN[@]}"; do
  pyj 'ops = json.load(open(sys.argv[3])) if sys.argv[3] else None
print(json.dumps({"run": sys.argv[1], "ops": ops, "lines": [l for l in open(sys.argv[2], errors="replace").read().splitlines()
      if l.split(" ")[0] in ("RESULT", "TIME", "STATS", "MAPPED", "PROBE", "DONE", "ERROR", "PASS")]}))' \
    "$name" "$W/runs/$name.out" "$([[ -f $W/runs/$name.ops.json ]] && echo "$W/runs/$name.ops.json")" >"$W/$name.json"
  samples+=("$W/$name.json")
done
[[ -f ${COMPARE:-} ]] && samples+=("$COMPARE")
python3 scripts/device-record.py "$RECORD_KIND" --out "$OUT" \
  --command "OUT=$OUT BACKEND=$BACKEND ISOLATION=$ISOLATION MODES='$MODES' scripts/device-torch-suite.sh" \
  --summary "$summary" "${samples[@]}" >>"$SUM" 2>&1 || log "device-record.py failed"
log "$FAILS check(s) failed; total $(($(date +%s) - T_START))s"
((FAILS == 0))
