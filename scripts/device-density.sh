#!/usr/bin/env bash
# What one forked learner holds on the device, by part (issue 18, density):
# a golden learner (qwen2.5-7b, 4-bit, DPO 2x256, STEPS steps, through the
# shims) forks one clone with --share on; while the clone trains, the
# script samples `smolvm cuda status --json` (each session's parts as its
# worker counts them: private chunks, modules, raised context limits,
# library handles' workspaces; context_mib = NVML for the worker less the
# chunks it owns) and NVML's per-process memory (nvidia-smi), and keeps the
# sample where NVML saw the clone's worker largest. A pooled worker's
# context (NVML, before the fork) is the bare context. First, what one
# cuBLAS, cuBLASLt and cuDNN handle hold (NVML), against their charge.
#
# Issue 18: the learner's own plan of its private memory (`smolvm-learner
# memory`, buffer by buffer, and the layout before for comparison), what the
# worker's context limits left (the clone's stack size after training, from
# its done event), and the clone's losses against a native run of the same
# lid with this build (must be equal bit for bit: the compact learner and
# the context limits change no arithmetic). The summary says whether the
# clone's NVML figure meets issue 18's per-clone targets (<= 1400 MiB for
# N=96 beside the golden, <= 1050 MiB for N=128).
#
# Prints the breakdown of the golden and the clone, and writes a record
# ($OUT/records/density_*.json, kind "density") whose summary is what
# docs/PERF.md's density table is generated from (`smolvm bench tables`).
# About 2-3 minutes (model made in ~11 s when missing; the native run loads
# the model once more, ~30 s).
#
# Usage: OUT=DIR scripts/device-density.sh [STEPS=3]
# Env: MODELS (default /tmp/smolvm_learner_models), BACKEND (default cuda;
# fake rehearses the script's plumbing without a GPU: no NVML figures).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build || { echo "device-density: no smolvm binary under build/ or .carry/build" >&2; exit 1; }
STEPS=${1:-3}
OUT=${OUT:-$PWD/device-density-out}
MODELS=${MODELS:-/tmp/smolvm_learner_models}
BACKEND=${BACKEND:-cuda}
mkdir -p "$OUT" "$MODELS"
make_workdir device-density
SOCK=$W/cuda.sock
LOG_TAG=density LOG_FILE=$OUT/density.txt
SMOLVM=$BUILD/smolvm
status_json() { "$SMOLVM" cuda status --socket "$SOCK" --json 2>/dev/null; }
apps() {  # pid,used MiB per compute process (nothing without nvidia-smi)
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | tr -d ' '
}
wait_for() {  # PY_EXPR SECONDS: polls the status until the expression holds
  local tries=$(($2 * 10))
  for _ in $(seq "$tries"); do
    [[ $(status_json | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)" 2>/dev/null) == True ]] && return 0
    sleep 0.1
  done
  return 1
}
on_exit daemon_stop
log "memory.used at start: $(smi_used) MiB; steps $STEPS; backend $BACKEND"
nvidia_lib_path "$BUILD/smolvm-learner"
if [[ ! -f $MODELS/qwen2.5-7b/config.json ]]; then
  "$BUILD/smolvm-learner" make-model --preset qwen2.5-7b --seed 0 --out "$MODELS/qwen2.5-7b" >"$W/make-model.txt" 2>&1 ||
    { log "make-model qwen2.5-7b failed: $(tail -2 "$W/make-model.txt")"; exit 1; }
  log "made qwen2.5-7b"
fi
# The learner's plan of what it allocates (no GPU needed): now and before.
SHAPE=(--load-in-4bit --method dpo --batch 2 --maxseq 256 --steps "$STEPS")
"$BUILD/smolvm-learner" memory "${SHAPE[@]}" >"$OUT/learner-memory.txt" 2>&1
"$BUILD/smolvm-learner" memory "${SHAPE[@]}" --json >"$W/plan.json" 2>>"$OUT/learner-memory.txt"
"$BUILD/smolvm-learner" memory "${SHAPE[@]}" --separate --json >"$W/plan-before.json" 2>>"$OUT/learner-memory.txt"
log "learner plan: $(tail -1 "$OUT/learner-memory.txt")"
# The compact learner against the layout before, on this GPU's cuBLAS: three
# NF4 DPO steps of a tiny model, losses and LoRA params bit for bit.
if [[ $BACKEND == cuda && -x $BUILD/learner/learner_gpu_test ]]; then
  "$BUILD/learner/learner_gpu_test" --gtest_filter='*CompactRunnerKeepsEveryLossBit*' >"$W/compact.txt" 2>&1
  COMPACT_RC=$?
  log "compact runner vs the layout before (GPU): $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$W/compact.txt" | head -1)"
fi
# What cublasCreate, cublasLtCreate and cudnnCreate hold per handle (NVML),
# beside what --gpu-mem charges them (src/backend/library_footprint_test.cc).
SMOLVM_REQUIRE_GPU=$([[ $BACKEND == cuda ]] && echo 1 || echo 0) "$BUILD/src/backend/library_footprint_test" \
  >"$W/footprint.txt" 2>&1
log "handles: $(grep -h 'library footprint measured\|Skipped' -A1 "$W/footprint.txt" | head -2 | tr '\n' ' ')$(grep -q FAILED "$W/footprint.txt" && echo ' (a handle holds more than its charge: FAILED)')"
daemon_start "$SOCK" "$OUT/density-daemon.log" --backend "$BACKEND" --pool 2 || { log "daemon: no admin socket"; exit 1; }
wait_for "j['ready_workers'] >= 2" 60 || log "pool: fewer than 2 ready workers"
status_json >"$W/pool.json"
apps >"$W/pool.csv"

mkdir -p "$W/ev"
SMOLVM_CUDA_SOCKET=$SOCK LD_LIBRARY_PATH=$BUILD/shim:${LD_LIBRARY_PATH:-} "$BUILD/smolvm-learner" train \
  --model "$MODELS/qwen2.5-7b" --load-in-4bit --method dpo --batch 2 --maxseq 256 --steps "$STEPS" --device cuda \
  --fork --coord "$W/ev" --arm density >"$W/golden.out" 2>"$W/golden.err" &
GOLDEN=$!
on_exit "kill $GOLDEN 2>/dev/null"
wait_for "any(s['pid']==$GOLDEN and s['state']=='forkpoint' for s in j['sessions'])" 150 ||
  { log "the golden did not reach its forkpoint: $(tail -3 "$W/golden.err")"; exit 1; }
wait_for "any(s['pid']==$GOLDEN and s['preloaded_workers']>=1 for s in j['sessions'])" 60
log "golden $GOLDEN at its forkpoint"
SMOLVM_CUDA_SOCKET=$SOCK timeout 60 "$SMOLVM" cuda fork --pid "$GOLDEN" --count 1 --share on --wait 30 \
  >"$W/fork.txt" 2>&1 || log "cuda fork failed: $(tail -2 "$W/fork.txt")"

# Sample while the clone trains; keep the sample where NVML saw its worker largest.
best=-1
deadline=$((SECONDS + 90))
while ((SECONDS < deadline)); do
  status_json >"$W/s.json"
  apps >"$W/a.csv"
  used=$(python3 - "$W/s.json" "$W/a.csv" <<'PY' 2>/dev/null
import json, sys
st = json.load(open(sys.argv[1]))
apps = dict(l.split(",")[:2] for l in open(sys.argv[2]) if "," in l)
clones = [s for s in st["sessions"] if s["role"] == "clone"]
print(apps.get(str(clones[0]["worker_pid"]), 0) if clones else -1)
PY
)
  if [[ ${used:--1} -ge 0 && ${used:--1} -ge $best ]]; then
    best=$used
    cp "$W/s.json" "$W/status.json"
    cp "$W/a.csv" "$W/apps.csv"
  fi
  grep -q '"done"' "$W/ev"/learner_*.jsonl 2>/dev/null && [[ $best -ge 0 ]] && break
  sleep 0.05
done
"$SMOLVM" cuda status --socket "$SOCK" >>"$OUT/density.txt" 2>&1
SMOLVM_CUDA_SOCKET=$SOCK "$SMOLVM" cuda release --pid "$GOLDEN" >/dev/null 2>&1
wait "$GOLDEN" 2>/dev/null
cp "$W/ev"/learner_*.jsonl "$OUT/" 2>/dev/null
[[ -f $W/status.json ]] || { log "no sample with the clone's session"; exit 1; }
daemon_stop

# The clone's lid, natively (no shims, no daemon): the same losses, bit for bit.
CLONE_LID=$(python3 -c "
import glob, json
for f in glob.glob('$W/ev/learner_*.jsonl'):
    for l in open(f):
        e = json.loads(l)
        if e.get('event') == 'done': print(e['lid'])" 2>/dev/null | head -1)
if [[ -n $CLONE_LID ]]; then
  mkdir -p "$W/native"
  "$BUILD/smolvm-learner" train --model "$MODELS/qwen2.5-7b" "${SHAPE[@]}" --device cuda --lid "$CLONE_LID" \
    --coord "$W/native" --arm native >"$W/native.out" 2>"$W/native.err" || log "native lid $CLONE_LID failed: $(tail -2 "$W/native.err")"
  cp "$W/native/learner_$CLONE_LID.jsonl" "$OUT/native_learner_$CLONE_LID.jsonl" 2>/dev/null
else
  log "the clone wrote no done event: no native comparison"
fi

python3 - "$W/status.json" "$W/apps.csv" "$W/pool.json" "$W/pool.csv" "$GOLDEN" "$W" "${CLONE_LID:--1}" "${COMPACT_RC:--1}" \
  >"$W/summary.json" 2>>"$OUT/density.txt" <<'PY'
import glob, json, statistics, sys
st, pool = json.load(open(sys.argv[1])), json.load(open(sys.argv[3]))
w, lid, compact_rc = sys.argv[6], sys.argv[7], int(sys.argv[8])
def apps_of(p):
    return {int(a): float(b) for a, b in (l.strip().split(",")[:2] for l in open(p) if "," in l)}
apps, apps0, golden = apps_of(sys.argv[2]), apps_of(sys.argv[4]), int(sys.argv[5])
pooled = [apps0[w["pid"]] for w in pool["pool"] if w["pid"] in apps0]
out = {"bare_context_mib": statistics.median(pooled) if pooled else None}
for role, s in (("golden", next(s for s in st["sessions"] if s["pid"] == golden)),
                ("clone", next(s for s in st["sessions"] if s["role"] == "clone"))):
    named = s["modules_mib"] + s["limits_mib"] + s["workspaces_mib"]
    out.update({f"{role}_nvml_mib": apps.get(s["worker_pid"]),
                f"{role}_private_mib": round(s["private_mib"], 1),
                f"{role}_shared_mib": round(s["shared_mib"], 1),
                f"{role}_modules_mib": round(s["modules_mib"], 1),
                f"{role}_limits_mib": round(s["limits_mib"], 1),
                f"{role}_workspaces_mib": round(s["workspaces_mib"], 1),
                # NVML less the chunks it owns, less the named parts: the
                # context itself and what no part names (library kernels...).
                f"{role}_context_rest_mib": round(s["context_mib"] - named, 1)})
def done(pattern):
    for f in glob.glob(pattern):
        for l in open(f):
            e = json.loads(l)
            if e.get("event") == "done": return e
    return {}
clone, native = done(f"{w}/ev/learner_{lid}.jsonl"), done(f"{w}/native/learner_{lid}.jsonl")
plan, before = json.load(open(f"{w}/plan.json")), json.load(open(f"{w}/plan-before.json"))
out.update({"plan_private_mib": round(plan["private_bytes"] / 2**20, 1),
            "plan_before_private_mib": round(before["private_bytes"] / 2**20, 1),
            "clone_stack_bytes": clone.get("stack_bytes"),
            # learner_gpu_test's CompactRunnerKeepsEveryLossBit on this GPU (None: not run).
            "compact_bits_equal_before": None if compact_rc < 0 else compact_rc == 0,
            # Losses as the learners printed them (JSON of the float: equal text is equal bits).
            "clone_losses_equal_native": bool(clone.get("losses")) and clone.get("losses") == native.get("losses"),
            "clone_within_1400": out["clone_nvml_mib"] is not None and out["clone_nvml_mib"] <= 1400,
            "clone_within_1050": out["clone_nvml_mib"] is not None and out["clone_nvml_mib"] <= 1050})
print(json.dumps(out))
PY
log "breakdown (MiB): $(cat "$W/summary.json")"
python3 - "$W/summary.json" <<'PY' | tee -a "$OUT/density.txt"
import json, sys
j = json.load(open(sys.argv[1]))
print(f"  bare context (a pooled worker, NVML): {j['bare_context_mib']}")
for r in ("golden", "clone"):
    print(f"  {r}: NVML {j[r + '_nvml_mib']} = private chunks {j[r + '_private_mib']}"
          + (f" + shared chunks {j[r + '_shared_mib']}" if r == "golden" else "")
          + f" + modules {j[r + '_modules_mib']} + limits {j[r + '_limits_mib']} + workspaces {j[r + '_workspaces_mib']}"
          f" + context and the rest {j[r + '_context_rest_mib']}")
print(f"  learner plan: {j['plan_private_mib']} MiB private (before issue 18: {j['plan_before_private_mib']});"
      f" clone stack after training: {j['clone_stack_bytes']} B/thread")
print(f"  compact learner bit-identical to the layout before (GPU test): {j['compact_bits_equal_before']};"
      f" clone losses equal to the native run of its lid: {j['clone_losses_equal_native']};"
      f" per clone <= 1400 MiB (N=96): {j['clone_within_1400']}, <= 1050 MiB (N=128): {j['clone_within_1050']}")
PY
tar czf "$OUT/density-samples.tgz" -C "$W" status.json apps.csv pool.json pool.csv fork.txt golden.err footprint.txt \
  plan.json plan-before.json native.err compact.txt 2>/dev/null
python3 scripts/device-record.py density --out "$OUT" --command "scripts/device-density.sh $STEPS" \
  --summary "$(cat "$W/summary.json")" "$W/status.json" | tee -a "$OUT/density.txt"
log "end: memory.used $(smi_used) MiB"
