#!/usr/bin/env bash
# The learner through the shim on the device machine, one session at a time
# (no fork): the same runs natively and remoted, losses compared bit for bit,
# tok/s side by side, and one record in $OUT/records/ (kind learner-shim);
# $OUT: learner-shim.txt, the daemon log, runs.tgz (outputs and events).
# Runs from the repo root with build/ carried.
# Usage: OUT=DIR scripts/device-learner-shim.sh [STEPS=20]
# Env: MODELS (default /tmp/smolvm_learner_models; made here when missing),
#      BACKEND (default cuda; fake for a dry run of the script itself).
# Exit 0 when every run finished and each model's losses are bit-identical;
# 1 otherwise. The record is written only when every run finished.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
STEPS=${1:-20}
OUT=${OUT:-$PWD/device-learner-shim-out}
MODELS=${MODELS:-/tmp/smolvm_learner_models}
mkdir -p "$OUT" "$MODELS"
make_workdir device-learner-shim
SOCK=$W/cuda.sock
BIN=$BUILD/smolvm-learner
unset BATCH MAXSEQ MODEL LEARNER_ID COORD ARM DPO_BETA
LOG_TAG=learner-shim LOG_FILE=$OUT/learner-shim.txt
mem0=$(smi_used)
log "memory.used at start: $mem0 MiB"
for m in qwen2.5-0.5b qwen2.5-7b; do
  [[ -f $MODELS/$m/config.json ]] || "$BIN" make-model --preset "$m" --seed 0 --out "$MODELS/$m" >/dev/null ||
    log "make-model $m FAILED"
done

failed_runs=() differ=()
on_exit daemon_stop
daemon_start "$SOCK" "$OUT/learner-shim-daemon.log" --backend "${BACKEND:-cuda}" --pool 1

# one TAG MODE ARGS...: MODE native|shim; prints the done line's numbers.
one() {
  local tag=$1 mode=$2; shift 2
  local coord=$W/ev_$tag
  mkdir -p "$coord"
  if [[ $mode == shim ]]; then
    SMOLVM_CUDA_SOCKET=$SOCK LD_LIBRARY_PATH=$BUILD/shim:${LD_LIBRARY_PATH:-} \
      "$BIN" train --coord "$coord" --arm "$tag" "$@" >"$OUT/$tag.out" 2>"$OUT/$tag.err"
  else
    "$BIN" train --coord "$coord" --arm "$tag" "$@" >"$OUT/$tag.out" 2>"$OUT/$tag.err"
  fi
  local rc=$?
  ((rc == 0)) || failed_runs+=("$tag")
  cp "$coord"/learner_*.jsonl "$OUT/ev_$tag.jsonl" 2>/dev/null
  log "$tag rc=$rc $(python3 - "$OUT/ev_$tag.jsonl" <<'PY' 2>/dev/null
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
d = [e for e in ev if e["event"] == "done"][0]
r = [e for e in ev if e["event"] == "ready"][0]
st = [e["ms"] for e in ev if e["event"] == "step"][2:]
print(f"load_ms={r['load_ms']:.0f} tok_s={d['tok_s']:.0f} warm_step_ms={sum(st)/len(st):.1f} loss0={d['loss0']:.6f} lossN={d['lossN']:.6f} peak_gb={d['peak_gb']:.2f}")
PY
)"
}
same() {  # A B: are the per-step losses bit-identical?
  python3 - "$OUT/ev_$1.jsonl" "$OUT/ev_$2.jsonl" <<'PY'
import json, os, struct, sys
def losses(p):
    if not os.path.exists(p):
        return []
    return [e["loss"] for e in map(json.loads, open(p)) if e["event"] == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
bits = lambda v: [struct.pack("<f", x) for x in v]
print("bit-identical" if a and bits(a) == bits(b) else f"DIFFERENT ({len(a)} vs {len(b)} steps; first {a[:3]} vs {b[:3]})")
PY
}
for spec in "05 --model $MODELS/qwen2.5-0.5b" "7b4 --model $MODELS/qwen2.5-7b --load-in-4bit"; do
  tag=${spec%% *} args=${spec#* }
  one "native_$tag" native $args --batch 2 --maxseq 256 --steps "$STEPS" --device cuda --lid 3
  one "shim_$tag" shim $args --batch 2 --maxseq 256 --steps "$STEPS" --device cuda --lid 3
  verdict=$(same "native_$tag" "shim_$tag" 2>&1)
  log "$tag losses native vs shim: $verdict"
  [[ $verdict == bit-identical ]] || differ+=("$tag")
done
# One record of this run for bench/records (docs/bench.md, "Records"): per
# model, tok/s natively and through the shim and whether the losses match.
summary=$(python3 - "$OUT" <<'PY'
import json, os, struct, sys
out, s = sys.argv[1], {}
def events(tag):
    p = os.path.join(out, f"ev_{tag}.jsonl")
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []
for m in ("05", "7b4"):
    done = {}
    for mode in ("native", "shim"):
        d = [e for e in events(f"{mode}_{m}") if e.get("event") == "done"]
        if d:
            done[mode] = d[0]
            s[f"{m}_{mode}_tok_s"] = d[0]["tok_s"]
    if len(done) == 2:
        s[f"{m}_shim_over_native"] = done["shim"]["tok_s"] / done["native"]["tok_s"]
        bits = lambda tag: [struct.pack("<f", e["loss"]) for e in events(tag) if e.get("event") == "step"]
        s[f"{m}_losses_identical"] = bool(bits(f"native_{m}")) and bits(f"native_{m}") == bits(f"shim_{m}")
print(json.dumps(s))
PY
)
if ((${#failed_runs[@]} == 0)); then
  python3 scripts/device-record.py learner-shim --out "$OUT" --command "scripts/device-learner-shim.sh $STEPS" \
    --summary "${summary:-{\}}" "$OUT"/ev_*.jsonl >>"$OUT/learner-shim.txt" 2>&1 || log "device-record.py failed"
else
  log "no record: run(s) ${failed_runs[*]} failed (their .err files are in runs.tgz)"
fi
"$BUILD/smolvm" cuda status --socket "$SOCK" >>"$OUT/learner-shim.txt" 2>&1
daemon_stop
sleep 1
log "daemon stopped; memory.used $(smi_used) MiB (start $mem0 MiB)"
# Few files come back from the device: the runs' outputs and events in one archive.
(cd "$OUT" && tar czf runs.tgz ./*.out ./*.err ev_*.jsonl 2>/dev/null && rm -f ./*.out ./*.err ev_*.jsonl)
if ((${#failed_runs[@]} + ${#differ[@]})); then
  log "FAIL: failed runs: ${failed_runs[*]:-none}; losses not bit-identical: ${differ[*]:-none}"
  exit 1
fi
