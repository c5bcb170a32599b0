#!/usr/bin/env bash
# The torch DPO LoRA workload (bench/peers/peft_dpo.py --config: torch +
# transformers + peft, random weights of Qwen2.5-0.5B's and 7B's shapes built
# on the GPU, bf16, batch 2x256, 20 steps, gradient checkpointing, SDPA)
# natively and through the shims on a bare host process (the variables
# `smolvm cuda env` prints, against a fresh daemon running the torch
# install's cuBLAS/cuBLASLt/cuDNN), reps alternating native / shim
# (issue 13, must-show 3). Per run: tok/s (all steps and warm), the losses as
# hex, and through the shims the round trips per warm step by op. Before
# them, tests/blas/bin/prog_hotpath natively and through the shims (seconds).
#
# Estimate on the H200 (PEFT 2x256 warm steps: 0.5B ~370 ms, 7B ~430 ms;
# docs/PERF-log.md): a run is ~10 s of imports, 2-10 s of model build and
# ~9 s of steps, so 12 runs (2 shapes x 3 reps x native/shim) take ~4-6
# minutes. BUDGET_S (default 400) stops starting runs that would not fit
# (judged by the last run of the same shape), and each run has its own
# timeout (RUN_TIMEOUT, default 100 s), so the call ends within 8.5 minutes
# even when a run hangs at the end of the budget.
#
# Usage: OUT=DIR scripts/device-torch-dpo.sh
# Env: PY (default /opt/torch/.venv/bin/python3), BUILD (default build, else
# .carry/build), MODELS (default "qwen2.5-0.5b qwen2.5-7b"), REPS (3), STEPS
# (20), BUDGET_S, RUN_TIMEOUT, DPO_SCRIPT (default bench/peers/peft_dpo.py; a
# stand-in rehearses the summary and records), BACKEND (cuda; fake rehearses the script
# without a GPU: the daemon, the environment, the records; the runs fail
# without torch, quickly and saying so).
# Writes to $OUT (five files): torch-dpo.txt (summary: per run rc, seconds,
# tok/s, losses; per shape the shim / native medians and whether the losses
# agree), torch-dpo-runs.log (every run's output), torch-dpo-daemon.log,
# torch-dpo-runs.jsonl (each run's JSON line, with shape, mode and rep) and
# torch-dpo-records.tar (records/torch-dpo_<stamp>.json, one per run, from
# scripts/device-record.py; `tar -xf torch-dpo-records.tar -C bench` puts
# them in bench/records/ to commit).
# Exit: 0 when every run finished; 1 on a setup failure (no python, no
# shims, daemon did not start) or when a run failed or was skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-torch-dpo-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
BUILD=${BUILD:-build}
[[ -x $BUILD/smolvm ]] || BUILD=.carry/build
MODELS=${MODELS:-qwen2.5-0.5b qwen2.5-7b}
REPS=${REPS:-3}
STEPS=${STEPS:-20}
BUDGET_S=${BUDGET_S:-400}
RUN_TIMEOUT=${RUN_TIMEOUT:-100}
BACKEND=${BACKEND:-cuda}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/device-torch-dpo.XXXXXX)
mkdir -p "$W/runs" "$W/records"
SOCK=$W/cuda.sock
T0=$SECONDS
SUM=$OUT/torch-dpo.txt
RUNS=$OUT/torch-dpo-runs.log
: >"$SUM" && : >"$RUNS"
log() { echo "[torch-dpo $(date +%T)] $*" | tee -a "$SUM"; }
smi_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1; }
DAEMON=
cleanup() {
  [[ -n $DAEMON ]] && kill -TERM "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

command -v "$PY" >/dev/null || { log "no python at $PY (set PY)"; exit 1; }
[[ -x $BUILD/smolvm && -f $BUILD/shim/libcudart.so.13 ]] || { log "no smolvm build with shims at $BUILD"; exit 1; }
B=$(cd "$BUILD" && pwd)

# The worker runs the torch install's cuBLAS, cuBLASLt and cuDNN (docs/shim.md).
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
LIBS=""
for d in "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cudnn/lib"; do [[ -d $d ]] && LIBS=${LIBS:+$LIBS:}$d; done
log "python $PY; worker libraries: ${LIBS:-default search}; backend $BACKEND; build $B"
setsid "$B/smolvm" _cuda-daemon "$SOCK" --backend "$BACKEND" --pool 1 ${LIBS:+--cuda-libs "$LIBS"} \
  2>"$OUT/torch-dpo-daemon.log" &
DAEMON=$!
for _ in $(seq 200); do [[ -S $SOCK.admin ]] && break; sleep 0.05; done
[[ -S $SOCK.admin ]] || { log "daemon did not start: $(tail -n 3 "$OUT/torch-dpo-daemon.log" | tr '\n' ' ')"; exit 1; }
ENVLINES=$("$B/smolvm" cuda env --socket "$SOCK") || { log "smolvm cuda env failed"; exit 1; }
log "shim env: $(echo "$ENVLINES" | tr '\n' ' ')"
mem0=$(smi_used)
log "memory.used at start: ${mem0:-?} MiB"

failed=0
# First, tests/blas/bin/prog_hotpath (a torch step in miniature, no torch):
# natively with the venv's libraries, then through the shims, where it
# checks that a steady step costs exactly its two round trips on the real
# backend too.
HOT=$B/tests/blas/bin/prog_hotpath
if [[ -x $HOT ]]; then
  for mode in native shim; do
    t=$SECONDS
    if [[ $mode == shim ]]; then
      (eval "$ENVLINES"; timeout -k 5 60 "$HOT") >"$W/hot.$mode" 2>&1
    else
      LD_LIBRARY_PATH=$LIBS timeout -k 5 60 "$HOT" >"$W/hot.$mode" 2>&1
    fi
    rc=$?
    { echo "===== prog_hotpath $mode rc=$rc"; cat "$W/hot.$mode"; } >>"$RUNS"
    log "prog_hotpath $mode rc=$rc $((SECONDS - t))s: $(grep -E '^(round trips|PASS|FAIL|note)' "$W/hot.$mode" | tr '\n' ';' | cut -c1-300)"
  done
else
  log "no $HOT (build the tests): hot-path check skipped"
fi

declare -A last_s  # seconds the last run of a shape took, to decide whether the next fits
# run SHAPE MODE REP
run() {
  local shape=$1 mode=$2 rep=$3 tag="$1-$2-$3" t=$SECONDS rc
  local json=$W/runs/torch-dpo-$tag.json out=$W/$tag.out
  local need=${last_s[$shape]:-60}
  if (( SECONDS - T0 + need > BUDGET_S )); then
    log "$tag: skipped (budget: $((SECONDS - T0)) s spent, the last $shape run took ${need} s, budget ${BUDGET_S} s)"
    failed=1
    return
  fi
  local cmd=("$PY" "${DPO_SCRIPT:-bench/peers/peft_dpo.py}" --config "$shape" --batch 2 --maxseq 256 --steps "$STEPS" --out "$json")
  rm -f "$json"
  if [[ $mode == shim ]]; then
    (eval "$ENVLINES"; env PYTHONUNBUFFERED=1 timeout -k 5 "$RUN_TIMEOUT" "${cmd[@]}") >"$out" 2>&1
  else
    env PYTHONUNBUFFERED=1 timeout -k 5 "$RUN_TIMEOUT" "${cmd[@]}" >"$out" 2>&1
  fi
  rc=$?
  last_s[$shape]=$((SECONDS - t))
  { echo "===== $tag rc=$rc $((SECONDS - t))s"; cat "$out"; } >>"$RUNS"
  if [[ $rc != 0 || ! -s $json ]]; then
    failed=1
    log "$tag rc=$rc $((SECONDS - t))s FAILED: $(grep -v '^\s*$' "$out" | tail -n 3 | tr '\n' ' ' | cut -c1-400)"
    return
  fi
  log "$tag rc=0 $((SECONDS - t))s $("$PY" - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rt = r.get("shim_round_trips") or {}
top = ", ".join(f"{k} {v}" for k, v in list((rt.get("by_op") or {}).items())[:6])
print(f"tok_s {r['tok_s']:.0f} warm {r['tok_s_warm']:.0f} step_ms_warm {r['step_ms_warm']:.1f} peak_gb {r['peak_gb']:.2f}"
      f" load_s {r['load_s']:.1f} loss0 {r['losses_hex'][0]} lossN {r['losses_hex'][-1]}"
      + (f" round_trips/step {rt['per_step']} queued/step {rt['queued_per_step']} [{top}]" if rt else ""))
PY
)"
  local summary
  summary=$("$PY" - "$json" "$mode" "$rep" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rt = r.get("shim_round_trips") or {}
s = {"shape": r["model"], "mode": sys.argv[2], "rep": int(sys.argv[3]), "steps": r["steps"],
     "tok_s": r["tok_s"], "tok_s_warm": r["tok_s_warm"], "step_ms_warm": r["step_ms_warm"], "peak_gb": r["peak_gb"],
     "loss0_hex": r["losses_hex"][0], "lossN_hex": r["losses_hex"][-1]}
if rt:
    s["round_trips_per_step"] = rt["per_step"]
print(json.dumps(s))
PY
)
  "$PY" scripts/device-record.py torch-dpo --out "$W" \
    --command "OUT=\$OUT scripts/device-torch-dpo.sh ($shape $mode rep $rep)" --summary "$summary" "$json" \
    >>"$RUNS" 2>&1 || log "$tag: device-record.py failed"
  sleep 1  # records are named by the second
}

for shape in $MODELS; do
  for rep in $(seq "$REPS"); do
    run "$shape" native "$rep"
    run "$shape" shim "$rep"
  done
done

# Per shape: medians and whether the losses agree (native with native first).
"$PY" - "$W/runs" $MODELS <<'PY' | tee -a "$SUM"
import glob, json, os, statistics, sys
out = sys.argv[1]
for shape in sys.argv[2:]:
    runs = {}
    for p in sorted(glob.glob(os.path.join(out, f"torch-dpo-{shape}-*.json"))):
        mode, rep = os.path.basename(p)[:-5].rsplit("-", 2)[1:]
        runs.setdefault(mode, []).append(json.load(open(p)))
    nat, shim = runs.get("native", []), runs.get("shim", [])
    if not nat or not shim:
        print(f"{shape}: not enough runs (native {len(nat)}, shim {len(shim)})")
        continue
    line = [f"{shape}: runs native {len(nat)} shim {len(shim)}"]
    for key in ("tok_s", "tok_s_warm"):
        n, s = statistics.median(r[key] for r in nat), statistics.median(r[key] for r in shim)
        line.append(f"{key} median native {n:.0f} shim {s:.0f} shim/native {s / n:.3f}")
    print("; ".join(line))
    nn = len({tuple(r["losses_hex"]) for r in nat}) == 1
    same = {tuple(r["losses_hex"]) for r in nat} == {tuple(r["losses_hex"]) for r in shim}
    if nn:
        print(f"{shape}: native runs bit-identical to each other; shim runs {'identical to them' if same else 'DIFFER'}")
    else:
        print(f"{shape}: native runs differ from each other (nondeterministic kernels)")
    if not same:
        a = [float.fromhex(x) for x in nat[0]["losses_hex"]]
        diffs = [max(abs(float.fromhex(x) - y) for x, y in zip(r["losses_hex"], a)) for r in shim + nat[1:]]
        print(f"{shape}: max abs loss difference to native rep 1: {max(diffs):.3e}")
    rt = [r["shim_round_trips"] for r in shim if r.get("shim_round_trips")]
    if rt:
        print(f"{shape}: shim round trips per warm step {rt[0]['per_step']} (queued ops {rt[0]['queued_per_step']}): "
              + ", ".join(f"{k} {v}" for k, v in rt[0]["by_op"].items()))
PY

# Each run's JSON line (tagged) and the records, as two files.
for f in "$W"/runs/torch-dpo-*.json; do
  [[ -f $f ]] || continue
  t=$(basename "$f" .json)
  "$PY" -c 'import json, sys; r = json.load(open(sys.argv[1])); r["run"] = sys.argv[2]; print(json.dumps(r))' "$f" "${t#torch-dpo-}"
done >"$OUT/torch-dpo-runs.jsonl"
tar -C "$W" -cf "$OUT/torch-dpo-records.tar" records
log "records: $(tar -tf "$OUT/torch-dpo-records.tar" | grep -c '\.json$') in torch-dpo-records.tar (tar -xf torch-dpo-records.tar -C bench)"

"$B/smolvm" cuda status --socket "$SOCK" >>"$SUM" 2>&1
kill -TERM "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null
DAEMON=
sleep 1
log "daemon stopped; memory.used $(smi_used) MiB (start ${mem0:-?} MiB); total $((SECONDS - T0)) s"
exit "$failed"
