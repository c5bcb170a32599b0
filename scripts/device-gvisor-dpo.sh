#!/usr/bin/env bash
# Issue 35, must-show 2 (the DPO half): the torch DPO LoRA workload
# (bench/peers/peft_dpo.py --config SHAPE: random weights of Qwen2.5's shapes
# built on the GPU, bf16, batch 2x256, gradient checkpointing, SDPA) natively,
# in a --cuda sandbox machine and in a --cuda gVisor machine (runsc's ptrace
# platform; no descriptors cross: docs/shim.md "Without descriptors"), reps
# alternating native / sandbox / gvisor. Per run: tok/s (all steps, warm),
# warm step ms, model build seconds, the losses as hex and, through the
# shims, the round trips per warm step by op. The summary says whether the
# losses are bit-identical to native's, gvisor/native and sandbox/native
# tok/s (goal >= 0.9 for gvisor) and where gVisor's time goes: its extra warm
# step time over the sandbox's, per round trip of the step.
#
# Estimate on the H200 (0.5B: ~10 s of imports, ~3 s of model build, ~8 s of
# steps natively; gVisor's imports ~20% slower): 6 runs in ~3.5 minutes.
# BUDGET_S (default 230) stops starting runs that would not fit; each run has
# RUN_TIMEOUT (default 100 s).
#
# Usage (repository root, root): OUT=DIR scripts/device-gvisor-dpo.sh
# Env: PY (default /opt/torch/.venv/bin/python3), BUILD (default build, else
# .carry/build), SHAPE (qwen2.5-0.5b), REPS (2), STEPS (20), ARMS ("native
# sandbox gvisor"), CPUS (per machine, default half the host's), BUDGET_S,
# RUN_TIMEOUT, SMOLVM_RUNSC (a carried runsc), BACKEND (cuda; fake rehearses
# on the fake backend with scripts/gvisor-dpo-standin.py in place of
# peft_dpo.py when $PY has no torch: the machines, volumes, records).
# Writes to $OUT: gvisor-dpo.txt (summary), gvisor-dpo-runs.log (every run's
# output), gvisor-dpo-daemon.log, records/gvisor_<UTC>.json (kind gvisor,
# every run's result as a sample).
# Exit: 0 every run finished and the losses agree; 1 otherwise; 2 cannot run
# here (no root, no build, no python).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/device-gvisor-dpo-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PY=${PY:-/opt/torch/.venv/bin/python3}
BUILD=${BUILD:-build}
[[ -x $BUILD/smolvm ]] || BUILD=.carry/build
SHAPE=${SHAPE:-qwen2.5-0.5b}
REPS=${REPS:-2}
STEPS=${STEPS:-20}
ARMS=${ARMS:-native sandbox gvisor}
BUDGET_S=${BUDGET_S:-230}
RUN_TIMEOUT=${RUN_TIMEOUT:-100}
BACKEND=${BACKEND:-cuda}
CPUS=${CPUS:-$(( $(nproc) > 1 ? $(nproc) / 2 : 1 ))}
SUM=$OUT/gvisor-dpo.txt RUNS=$OUT/gvisor-dpo-runs.log
: >"$SUM" && : >"$RUNS"
T0=$SECONDS
log() { echo "[gvisor-dpo $(date +%T)] $*" | tee -a "$SUM"; }
pyj() { python3 -c "import json,sys; $1" "${@:2}"; }

[[ $(id -u) == 0 ]] || { log "cannot run: --cuda machines need root"; exit 2; }
[[ -x $BUILD/smolvm && -f $BUILD/shim/libcudart.so.13 ]] || { log "cannot run: no smolvm build with shims at $BUILD"; exit 2; }
command -v "$PY" >/dev/null || { log "cannot run: no python at $PY (set PY)"; exit 2; }
B=$(cd "$BUILD" && pwd)
SMOLVM=$B/smolvm
DPO=${DPO_SCRIPT:-bench/peers/peft_dpo.py}
if ! "$PY" -c 'import torch, transformers, peft' >/dev/null 2>&1; then
  [[ $BACKEND == fake ]] || { log "cannot run: $PY cannot import torch, transformers and peft (BACKEND=fake rehearses)"; exit 2; }
  DPO=scripts/gvisor-dpo-standin.py
  log "no torch at $PY: rehearsal with $DPO on the fake backend"
fi
DPO_DIR=$(cd "$(dirname "$DPO")" && pwd)

W=$(mktemp -d /tmp/device-gvisor-dpo.XXXXXX)
chmod 0755 "$W"
export SMOLVM_HOME=$W/home SMOLVM_CGROUP_PARENT=smolvm-gvdpo-$$ SMOLVM_CUDA_BACKEND=$BACKEND SMOLVM_CUDA_POOL=1
unset SMOLVM_CUDA_SOCKET SMOLVM_SHIM_DIR
mkdir -p "$SMOLVM_HOME" "$W/runs" "$W/samples"
MACHINES=()
cleanup() {
  for m in "${MACHINES[@]}"; do "$SMOLVM" machine rm --name "$m" --force --grace 0 >/dev/null 2>&1; done
  cp -f "$SMOLVM_HOME/cuda/daemon.log" "$OUT/gvisor-dpo-daemon.log" 2>/dev/null
  "$SMOLVM" cuda shutdown --grace 10 >/dev/null 2>&1
  for h in /sys/fs/cgroup/ /sys/fs/cgroup/*/; do rmdir "$h$SMOLVM_CGROUP_PARENT" 2>/dev/null; done
  rm -rf "$W"
}
trap cleanup EXIT

# The venv (and the interpreter it was made from) read-only in the machines;
# the workers run its cuBLAS/cuBLASLt/cuDNN (docs/shim.md).
VENV=$(dirname "$(dirname "$PY")")
VOLS=(-v "$DPO_DIR:/dpo:ro")
[[ $VENV == /usr ]] || VOLS+=(-v "$VENV:$VENV:ro")  # a system python is in every machine already
real=$(readlink -f "$PY")
case $real in
  /usr/* | /bin/* | "$VENV"/*) ;;
  *) prefix=$(dirname "$(dirname "$real")"); VOLS+=(-v "$prefix:$prefix:ro") ;;
esac
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
LIBS=""
for d in "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cudnn/lib"; do [[ -d $d ]] && LIBS=${LIBS:+$LIBS:}$d; done
[[ -n $LIBS ]] && export SMOLVM_CUDA_LIBS=$LIBS
log "python $PY; script $DPO; shape $SHAPE; arms $ARMS; reps $REPS; backend $BACKEND; runsc ${SMOLVM_RUNSC:-from PATH}"

failed=0
declare -A last_s
# run ARM REP: $W/runs/ARM-REP.json (the script's --out) and .out.
run() {
  local arm=$1 rep=$2 tag=$1-$2 t=$SECONDS rc state=running
  local need=${last_s[$arm]:-60}
  if ((SECONDS - T0 + need > BUDGET_S)); then
    log "$tag: skipped (budget: $((SECONDS - T0)) s spent, the last $arm run took $need s, budget $BUDGET_S s)"
    failed=1
    return
  fi
  local dir=$W/runs/$tag
  mkdir -p "$dir" && chmod 0777 "$dir"
  local args=(--config "$SHAPE" --batch 2 --maxseq 256 --steps "$STEPS")
  if [[ $arm == native ]]; then
    env PYTHONUNBUFFERED=1 timeout -k 5 "$RUN_TIMEOUT" "$PY" "$DPO" "${args[@]}" --out "$dir/result.json" \
      >"$dir.out" 2>&1
    rc=$?
  else
    MACHINES+=("$tag")
    "$SMOLVM" machine create --name "$tag" --isolation "$arm" --cuda --cpus "$CPUS" "${VOLS[@]}" -v "$dir:/out" \
      -e PYTHONUNBUFFERED=1 -- "$PY" "/dpo/$(basename "$DPO")" "${args[@]}" --out /out/result.json \
      >"$W/$tag.cli" 2>&1 && "$SMOLVM" machine start --name "$tag" >>"$W/$tag.cli" 2>&1 ||
      { log "$tag: machine create/start failed: $(tail -n 2 "$W/$tag.cli" | tr '\n' ' ')"; failed=1; return; }
    while ((SECONDS - t < RUN_TIMEOUT)); do
      state=$("$SMOLVM" machine list --json | pyj 'print([m["state"] for m in json.load(sys.stdin) if m["name"] == sys.argv[1]][0])' "$tag" 2>/dev/null)
      [[ $state == running* ]] || break
      sleep 0.3
    done
    "$SMOLVM" machine logs --name "$tag" >"$dir.out" 2>&1
    [[ $state == running* ]] && echo "TIMEOUT after ${RUN_TIMEOUT}s" >>"$dir.out"
    "$SMOLVM" machine rm --name "$tag" --force --grace 2 >>"$W/$tag.cli" 2>&1
    rc=$([[ $state == stopped ]] && echo 0 || echo 1)
  fi
  last_s[$arm]=$((SECONDS - t))
  { echo "===== $tag rc=$rc $((SECONDS - t))s"; cat "$dir.out"; } >>"$RUNS"
  if [[ $rc != 0 || ! -s $dir/result.json ]]; then
    failed=1
    log "$tag rc=$rc $((SECONDS - t))s FAILED: $(grep -v '^\s*$' "$dir.out" | tail -n 3 | tr '\n' ' ' | cut -c1-400)"
    return
  fi
  pyj 'r = json.load(open(sys.argv[1])); r["arm"], r["rep"], r["wall_s"] = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
print(json.dumps(r))' "$dir/result.json" "$arm" "$rep" "$((SECONDS - t))" >"$W/samples/$tag.json"
  log "$tag rc=0 $((SECONDS - t))s $(pyj 'r = json.load(open(sys.argv[1])); rt = r.get("shim_round_trips") or {}
print("tok_s %.0f warm %.0f step_ms_warm %.1f load_s %.1f lossN %s%s" % (r["tok_s"], r["tok_s_warm"], r["step_ms_warm"],
      r["load_s"], r["losses_hex"][-1], " round_trips/step %s" % rt["per_step"] if rt else ""))' "$W/samples/$tag.json")"
}

for rep in $(seq "$REPS"); do
  for arm in $ARMS; do run "$arm" "$rep"; done
done

# The comparison: medians per arm, losses against native's, where the time goes.
summary=$(python3 - "$W/samples" <<'PY'
import glob, json, os, statistics, sys
runs = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    r = json.load(open(p))
    runs.setdefault(r["arm"], []).append(r)
med = lambda arm, k: statistics.median(r[k] for r in runs[arm]) if runs.get(arm) else None
s = {"workload": "torch-dpo", "shape": None, "runs": {a: len(v) for a, v in runs.items()}}
for arm in runs:
    s["shape"] = runs[arm][0].get("model")
    for k in ("tok_s", "tok_s_warm", "step_ms_warm", "load_s"):
        s[f"{arm}_{k}"] = med(arm, k)
    rt = [r["shim_round_trips"]["per_step"] for r in runs[arm] if r.get("shim_round_trips")]
    if rt:
        s[f"{arm}_round_trips_per_step"] = rt[0]
losses = {a: {tuple(r["losses_hex"]) for r in v} for a, v in runs.items()}
if "native" in losses:
    s["native_runs_identical"] = len(losses["native"]) == 1
    for arm in losses:
        if arm != "native":
            s[f"{arm}_losses_identical_to_native"] = losses[arm] == losses["native"]
for arm in ("gvisor", "sandbox"):
    for k in ("tok_s", "tok_s_warm"):
        if s.get(f"native_{k}") and s.get(f"{arm}_{k}"):
            s[f"{arm}_over_native_{k}"] = round(s[f"{arm}_{k}"] / s[f"native_{k}"], 4)
# Where gVisor's time goes: its warm step over the sandbox's (same shims,
# same worker), per round trip the step makes (each crosses the sentry).
if s.get("gvisor_step_ms_warm") and s.get("sandbox_step_ms_warm") and s.get("gvisor_round_trips_per_step"):
    extra = s["gvisor_step_ms_warm"] - s["sandbox_step_ms_warm"]
    s["gvisor_extra_step_ms_over_sandbox"] = round(extra, 3)
    s["gvisor_extra_us_per_round_trip"] = round(1e3 * extra / s["gvisor_round_trips_per_step"], 2)
if s.get("gvisor_load_s") and s.get("native_load_s"):
    s["gvisor_extra_load_s"] = round(s["gvisor_load_s"] - s["native_load_s"], 3)
s["goal_gvisor_over_native_tok_s"] = 0.9
print(json.dumps(s))
PY
)
log "summary: $summary"
# Every arm asked for must have runs to compare: an arm whose runs all failed
# is no PASS of its losses.
ok=$(pyj 's = json.loads(sys.argv[1]); arms = [a for a in sys.argv[2].split() if a != "native"]; print(int(all(s.get(f"{a}_losses_identical_to_native") for a in arms)))' "$summary" "$ARMS")
if [[ $ok == 1 ]]; then log "PASS: the losses of every machine run are bit-identical to native's"
else log "FAIL: losses differ from native's, or an arm has no run to compare"; failed=1; fi
ratio=$(pyj 'print(json.loads(sys.argv[1]).get("gvisor_over_native_tok_s", "?"))' "$summary")
log "gvisor / native tok/s: $ratio (goal >= 0.9); where the time goes: extra warm step $(pyj 's = json.loads(sys.argv[1]); print(s.get("gvisor_extra_step_ms_over_sandbox", "?"), "ms over the sandbox,", s.get("gvisor_extra_us_per_round_trip", "?"), "us per round trip;", "model build +%s s" % s.get("gvisor_extra_load_s", "?"))' "$summary")"

BUILD=$B python3 scripts/device-record.py gvisor --out "$OUT" \
  --command "OUT=\$OUT SHAPE=$SHAPE REPS=$REPS ARMS='$ARMS' BACKEND=$BACKEND scripts/device-gvisor-dpo.sh" \
  --summary "$summary" "$W"/samples/*.json >>"$SUM" 2>&1 || log "device-record.py failed"
log "total $((SECONDS - T0)) s"
exit "$failed"
