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
# Prints the breakdown of the golden and the clone, and writes a record
# ($OUT/records/density_*.json, kind "density") whose summary is what
# docs/PERF.md's density table is generated from (`smolvm bench tables`).
# About 1-2 minutes (model made in ~11 s when missing).
#
# Usage: OUT=DIR scripts/device-density.sh [STEPS=2]
# Env: MODELS (default /tmp/smolvm_learner_models), BACKEND (default cuda;
# fake rehearses the script's plumbing without a GPU: no NVML figures).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build || { echo "device-density: no smolvm binary under build/ or .carry/build" >&2; exit 1; }
STEPS=${1:-2}
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

python3 - "$W/status.json" "$W/apps.csv" "$W/pool.json" "$W/pool.csv" "$GOLDEN" >"$W/summary.json" 2>>"$OUT/density.txt" <<'PY'
import json, statistics, sys
st, pool = json.load(open(sys.argv[1])), json.load(open(sys.argv[3]))
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
PY
tar czf "$OUT/density-samples.tgz" -C "$W" status.json apps.csv pool.json pool.csv fork.txt golden.err footprint.txt 2>/dev/null
python3 scripts/device-record.py density --out "$OUT" --command "scripts/device-density.sh $STEPS" \
  --summary "$(cat "$W/summary.json")" "$W/status.json" | tee -a "$OUT/density.txt"
daemon_stop
log "end: memory.used $(smi_used) MiB"
