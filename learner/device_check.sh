#!/usr/bin/env bash
# Runs the learner's GPU checks on a machine with an NVIDIA GPU, python3 with
# torch + transformers + peft + safetensors, and a tree built elsewhere
# (build/smolvm-learner and build/learner/learner_gpu_test carried over).
#
# Usage: learner/device_check.sh OUTDIR [--phase P]...   (default: all)
# Phases (each well under 10 minutes; ~minutes in total on an H200):
#   tests      the GPU unit tests (kernels and a whole step vs the CPU path)
#   models     make-model qwen2.5-0.5b and qwen2.5-7b into $MODELS
#   train7b4   native 7B, --load-in-4bit, DPO, 2x256, 20 steps: loss falls, no nan
#   side05     bf16 0.5B 2x256: smolvm-learner vs bench/peers/peft_dpo.py
#   side7      bf16 7B   2x256: the same
#   side8k     bf16 8x1024 (0.5B and 7B): the same
#   adapter    --save-adapter -> PeftModel.from_pretrained logits vs ours (0.5B)
#   load       7B load time from the page cache (bf16 and 4-bit)
#   summary    OUTDIR/summary.json from whatever the phases wrote, and one
#              record, OUTDIR/records/learner_*.json (kind learner)
# Env: MODELS (default /tmp/smolvm_learner_models), STEPS (20), PY (python3).
# Exits 1 when a run, a test or a check failed (each logged as FAIL); the
# phases after it still run, so the summary and record show what did finish.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
out=${1:?usage: learner/device_check.sh OUTDIR [--phase P]...}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
phases=()
while (($#)); do
  case $1 in
    --phase) phases+=("$2"); shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
((${#phases[@]})) || phases=(tests models train7b4 side05 side7 side8k adapter load summary)
MODELS=${MODELS:-/tmp/smolvm_learner_models}
STEPS=${STEPS:-20}
PY=${PY:-python3}
BIN=$PWD/build/smolvm-learner
GTEST=$PWD/build/learner/learner_gpu_test
unset BATCH MAXSEQ MODEL LEARNER_ID COORD ARM DPO_BETA  # flags below say everything

# The binaries link libcudart/libcublas dynamically; find them if the
# loader cannot (toolkit elsewhere, or only pip's nvidia wheels).
nvidia_lib_path "$BIN" "$PY"
LOG_TAG=learner LOG_FILE=$out/device_check.log
FAILS=0
fail() { FAILS=$((FAILS + 1)); log "FAIL: $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1

# train ARGS... : runs the learner with events in $out/ev_<tag>; prints the done line.
ours() {
  local tag=$1; shift
  local coord=$out/ev_$tag
  rm -rf "$coord"; mkdir -p "$coord"
  "$BIN" train --coord "$coord" --arm "$tag" "$@" > "$out/ours_$tag.out" 2> "$out/ours_$tag.err"
  local rc=$?
  log "ours $tag rc=$rc $(grep '"done"' "$out/ours_$tag.out" | head -c 400)"
  ((rc == 0)) || fail "ours $tag exited $rc: $(tail -1 "$out/ours_$tag.err")"
  return $rc
}
peer() {
  local tag=$1; shift
  timeout 580 $PY bench/peers/peft_dpo.py --out "$out/peft_$tag.json" "$@" > "$out/peft_$tag.out" 2> "$out/peft_$tag.err"
  local rc=$?
  log "peft $tag rc=$rc $(head -c 400 "$out/peft_$tag.json" 2>/dev/null)"
  ((rc == 0)) || fail "peft $tag exited $rc: $(tail -1 "$out/peft_$tag.err")"
  return $rc
}

for p in "${phases[@]}"; do
  log "phase $p"
  case $p in
    tests)
      "$GTEST" --gtest_color=no > "$out/gpu_tests.txt" 2>&1 || fail "the learner's GPU tests"
      log "gpu tests $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$out/gpu_tests.txt" | tr '\n' ' ')"
      ;;
    models)
      mkdir -p "$MODELS"
      for m in qwen2.5-0.5b qwen2.5-7b; do
        [[ -f $MODELS/$m/config.json ]] && continue
        s=$(date +%s%N)
        "$BIN" make-model --preset "$m" --seed 0 --out "$MODELS/$m" || fail "make-model $m"
        log "make-model $m $(( ($(date +%s%N) - s) / 1000000 )) ms, $(du -sh "$MODELS/$m" | cut -f1)"
      done
      # transformers must load what we wrote.
      $PY - "$MODELS/qwen2.5-0.5b" > "$out/hf_load.txt" 2>&1 <<'PYEOF'
import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
print("loaded", type(m).__name__, sum(p.numel() for p in m.parameters()))
PYEOF
      (($? == 0)) || fail "transformers could not load the 0.5B model we wrote"
      log "hf load $(tail -1 "$out/hf_load.txt")"
      ;;
    train7b4)
      ours train7b4 --model "$MODELS/qwen2.5-7b" --load-in-4bit --method dpo --batch 2 --maxseq 256 --steps "$STEPS" --device cuda
      ;;
    side05)
      ours side05 --model "$MODELS/qwen2.5-0.5b" --batch 2 --maxseq 256 --steps "$STEPS" --device cuda
      ours side05_noprefix --model "$MODELS/qwen2.5-0.5b" --batch 2 --maxseq 256 --steps "$STEPS" --device cuda --no-prefix-sharing
      peer side05 --model "$MODELS/qwen2.5-0.5b" --batch 2 --maxseq 256 --steps "$STEPS"
      peer side05_keep --model "$MODELS/qwen2.5-0.5b" --batch 2 --maxseq 256 --steps "$STEPS" --keep-logits completion
      ;;
    side7)
      ours side7 --model "$MODELS/qwen2.5-7b" --batch 2 --maxseq 256 --steps "$STEPS" --device cuda
      ours side7_noprefix --model "$MODELS/qwen2.5-7b" --batch 2 --maxseq 256 --steps "$STEPS" --device cuda --no-prefix-sharing
      peer side7 --model "$MODELS/qwen2.5-7b" --batch 2 --maxseq 256 --steps "$STEPS"
      peer side7_keep --model "$MODELS/qwen2.5-7b" --batch 2 --maxseq 256 --steps "$STEPS" --keep-logits completion
      ;;
    side8k)
      ours side8k05 --model "$MODELS/qwen2.5-0.5b" --batch 8 --maxseq 1024 --steps 8 --device cuda
      peer side8k05 --model "$MODELS/qwen2.5-0.5b" --batch 8 --maxseq 1024 --steps 8
      ours side8k7 --model "$MODELS/qwen2.5-7b" --batch 8 --maxseq 1024 --steps 6 --device cuda
      peer side8k7 --model "$MODELS/qwen2.5-7b" --batch 8 --maxseq 1024 --steps 6
      ;;
    adapter)
      # The adapter (~35 MB) and logits (~40 MB) stay in $MODELS; results go to $out.
      rm -rf "$MODELS/adapter"
      ours adapter --model "$MODELS/qwen2.5-0.5b" --batch 2 --maxseq 128 --steps 20 --lr 5e-3 --device cuda \
        --save-adapter "$MODELS/adapter" --dump-logits "$MODELS/adapter_logits.safetensors"
      cp "$MODELS/adapter/adapter_config.json" "$out/" 2>/dev/null
      $PY bench/peers/peft_adapter_check.py --model "$MODELS/qwen2.5-0.5b" --adapter "$MODELS/adapter" \
        --logits "$MODELS/adapter_logits.safetensors" --out "$out/adapter_check.json" > "$out/adapter_check.out" 2>&1 ||
        fail "the adapter check"
      log "adapter check $(cat "$out/adapter_check.json" 2>/dev/null)"
      ;;
    load)
      cat "$MODELS"/qwen2.5-7b/*.safetensors > /dev/null  # into the page cache
      ours load7 --model "$MODELS/qwen2.5-7b" --batch 1 --maxseq 64 --steps 1 --device cuda
      ours load7q --model "$MODELS/qwen2.5-7b" --load-in-4bit --batch 1 --maxseq 64 --steps 1 --device cuda
      ;;
    summary)
      MODELS=$MODELS $PY - "$out" > "$out/summary.json" <<'PYEOF'
import glob, json, os, sys
out = sys.argv[1]
def events(tag):
    p = f"{out}/ev_{tag}"
    ev = []
    for f in glob.glob(p + "/learner_*.jsonl"):
        ev += [json.loads(l) for l in open(f)]
    return ev
def ours(tag, warmup=2):
    ev = events(tag)
    done = [e for e in ev if e["event"] == "done"]
    ready = [e for e in ev if e["event"] == "ready"]
    steps = [e for e in ev if e["event"] == "step"]
    if not done:
        return None
    d = dict(done[0])
    d["load_ms"] = ready[0]["load_ms"] if ready else None
    warm = [s["ms"] for s in steps[warmup:]] or [s["ms"] for s in steps]
    tokens = d["tok_s"] * d["train_s"] / max(1, len(steps))  # per step
    d["tok_s_warm"] = tokens * len(warm) / (sum(warm) / 1e3)
    d["step_ms_warm"] = sum(warm) / len(warm)
    d["nan"] = any(s["loss"] is None or s["loss"] != s["loss"] for s in steps)
    return d
def peer(tag):
    try:
        return json.load(open(f"{out}/peft_{tag}.json"))
    except Exception:
        return None
res = {"gpu": open(f"{out}/gpu.txt").read().strip() if os.path.exists(f"{out}/gpu.txt") else None}
for tag in ["train7b4", "load7", "load7q", "adapter"]:
    res[tag] = ours(tag)
# MFU: useful FLOPs per warm step / step time / peak. Per token of a DPO
# row (chosen and rejected rows both count, 2 x batch x maxseq tokens): the
# policy forward (2N), the reference forward (2N) and the policy backward to
# activations (2N; the frozen base needs no weight gradient): 6N. N counts the
# projections and the LM head, not the embedding lookup; attention's own
# FLOPs and the recompute are left out (standard MFU). Peak: H200 dense bf16
# 989.4 TFLOP/s (4-bit GEMMs run in bf16 after dequantization).
PEAK = 989.4e12
def params(model):
    c = json.load(open(f"{model}/config.json"))
    D, I, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    KV = D // c["num_attention_heads"] * c["num_key_value_heads"]
    return L * (2 * D * D + 2 * KV * D + 3 * I * D) + V * D
def mfu(d, model, batch, maxseq):
    if not d or not d.get("step_ms_warm"):
        return None
    flops = 6 * params(model) * 2 * batch * maxseq
    return flops / (d["step_ms_warm"] / 1e3) / PEAK
MODELS = os.environ.get("MODELS", "/tmp/smolvm_learner_models")
SHAPES = {"train7b4": ("qwen2.5-7b", 2, 256), "side05": ("qwen2.5-0.5b", 2, 256), "side7": ("qwen2.5-7b", 2, 256),
          "side8k05": ("qwen2.5-0.5b", 8, 1024), "side8k7": ("qwen2.5-7b", 8, 1024)}
for tag in ["train7b4"]:
    if res[tag]:
        m, b, s = SHAPES[tag]
        res[tag]["mfu"] = mfu(res[tag], f"{MODELS}/{m}", b, s)
if res["train7b4"]:
    t = res["train7b4"]
    ls = [x for x in t["losses"] if x is not None]
    res["train7b4"]["loss_falls"] = t["lossN"] is not None and t["lossN"] < t["loss0"]
    res["train7b4"]["mean_first5"] = sum(ls[:5]) / 5 if len(ls) >= 5 else None
    res["train7b4"]["mean_last5"] = sum(ls[-5:]) / 5 if len(ls) >= 5 else None
for tag, ptag in [("side05", "side05"), ("side7", "side7"), ("side8k05", "side8k05"), ("side8k7", "side8k7")]:
    o, p, pk = ours(tag), peer(ptag), peer(ptag + "_keep")
    row = {"ours": o, "peft": p, "peft_keep_completion_logits": pk}
    if o and p:
        row["speedup"] = o["tok_s"] / p["tok_s"]
        row["speedup_warm"] = o["tok_s_warm"] / p["tok_s_warm"]
        row["mem_ratio"] = o["peak_gb"] / p["peak_gb"]
    if o and pk:
        row["speedup_warm_vs_keep"] = o["tok_s_warm"] / pk["tok_s_warm"]
    if o:
        m, b, s = SHAPES[tag]
        row["mfu"] = mfu(o, f"{MODELS}/{m}", b, s)
    nop = ours(tag + "_noprefix")
    if nop:
        row["ours_no_prefix_sharing"] = nop
        if p:
            row["speedup_warm_no_prefix_sharing"] = nop["tok_s_warm"] / p["tok_s_warm"]
    res[tag] = row
try:
    res["adapter_check"] = json.load(open(f"{out}/adapter_check.json"))
except Exception:
    res["adapter_check"] = None
print(json.dumps(res, indent=1))
PYEOF
      log "summary written: $out/summary.json"
      # One record of this run for bench/records (docs/bench.md, "Records"):
      # the native 7B 4-bit run's tok/s and MFU, ours ÷ PEFT per shape; the
      # samples are summary.json (each run's done event and warm steps).
      rec=$($PY - "$out/summary.json" <<'PYEOF'
import json, sys
r, s = json.load(open(sys.argv[1])), {}
for k in ("tok_s", "tok_s_warm", "mfu", "loss_falls"):
    if (r.get("train7b4") or {}).get(k) is not None:
        s[f"train7b4_{k}"] = r["train7b4"][k]
for tag in ("side05", "side7", "side8k05", "side8k7"):
    for k in ("speedup_warm", "mfu", "mem_ratio"):
        if (r.get(tag) or {}).get(k) is not None:
            s[f"{tag}_{k}"] = r[tag][k]
print(json.dumps(s))
PYEOF
)
      $PY scripts/device-record.py learner --out "$out" --command "learner/device_check.sh OUTDIR ${phases[*]/#/--phase }" \
        --summary "${rec:-{\}}" "$out/summary.json" || log "device-record.py failed"
      ;;
    *) fail "unknown phase $p" ;;
  esac
done
log "$FAILS check(s) failed"
((FAILS == 0))
