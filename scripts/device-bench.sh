#!/usr/bin/env bash
# The H200 bench, resumable across device sessions. Three plans:
#
#   scripts/device-bench.sh [BUDGET_S=330]
#     issue 7's cells: qwen2.5-7b preset, 4-bit, DPO, 2x256, 20 steps, 4 CPUs
#     per learner — native N=4,8,16 and fork share on N=4,8,16: 3 reps; fork
#     share off N=4: 3 reps; native N=1, fork share on N=1,32: 1 rep; then
#     `bench highn` at 10 steps (share on). Result files go to bench/results
#     (so the next session skips what is done). No new run starts after
#     BUDGET seconds.
#
#   scripts/device-bench.sh headline PART
#     (PART: native | native-16 | fork-low | fork-16 | fork-high | extra | rest)
#     re-measures the README headline's cells with their steps x reps
#     (N=1: 20x1; N=4,8,16: 20x3; N=24,32,48,64: 10x1), by a build that
#     writes t_done and learner_errors itself (result schema 2), into
#     bench/next/results (logs in bench/next/logs). One device call per PART,
#     each under 9 minutes (no run starts after BUDGET s; estimates from the
#     committed runs' walls + ~3 s per run + 11 s to make the 7B model on a
#     fresh machine):
#       native     native N=1 (20), N=4,8 (20 x3), N=24 (10: ~5 of 24 learners
#                  run out of GPU memory; their error lines are in the result)  ~4.2 min
#       native-16  native N=16 (20 x3)                                           ~3.9 min
#       fork-low   fork share on N=1 (20), N=4,8 (20 x3), N=24 (10)               ~4.4 min
#       fork-16    fork share on N=16 (20 x3)                                    ~3.7 min
#       fork-high  fork share on N=32,48,64 (10)                                 ~5.7 min
#       extra      the other cells of docs/PERF.md and bench/RESULTS.md: fork
#                  share off N=4 (20 x3), native and fork N=16 (10), fork N=32
#                  (20)                                                          ~4.9 min
#       rest       the cells still marked † on 2026-12-04 15:50 (the others
#                  were re-measured by other parts and the comparison's runs):
#                  fork share off N=4 (20 x3), fork share on N=32 (20), native
#                  N=24 (10: its learners' out-of-memory lines in the result)   ~5 min
#     Back here, per part: tar xzf <files_at>/results.tgz; then
#     mv bench/next/results/*.json bench/results/ && scripts/gen-tables.sh
#     (schema-2 runs of a cell supersede its schema-1 runs in every table).
#     BUDGET_S=S (environment) replaces the part's budget, for a plan that
#     runs two parts in one call (scripts/plans/headline-native.plan).
#     KEEP_NEXT=1 keeps bench/next (carry it to resume a part cut short: the
#     sweeps skip the reps already there).
#
#   scripts/device-bench.sh comparison PART
#     (PART: bf16-fork | bf16-native | bf16-highn | mps)
#     issue 18's comparison cells (qwen2.5-7b, DPO, 2x256, 4 CPUs), into
#     bench/next/results like `headline`, one device call per PART, each
#     under 9 minutes (estimates include making the 7B model on a fresh machine):
#       bf16-fork    fork share on, bf16 base: N=8 (20 steps, 3 reps) and native
#                    4-bit N=8 (20 steps, 3 reps) beside it; then fork bf16
#                    N=16 (20), N=24,32 (10)                                       ~6.5 min
#       bf16-native  native bf16: N=1,4,8 (20 steps), then N=9 unless 8 did not
#                    fit (`bench highn` stops native at its first incomplete N)   ~3.5 min
#       bf16-highn   fork share on, bf16 base: N=48,64,96,100,104 (10 steps;
#                    HIGHN_NS=LIST for some only); a fork beyond the card is
#                    refused by the daemon (its admission, or a clone's worker
#                    whose context does not fit): a result, 0 of N, that the
#                    comparison reads "does not fit"; the largest complete N is
#                    the largest that fits (H200: 100 fits, 104 does not)       ~9 min
#       mps          native 4-bit under the bench's own MPS (--mps) and
#                    time-sliced beside it: N=4,8,16 (20 steps)                    ~5.5 min
#     The README's comparison table shows each cell as "not measured" until
#     its result is committed.
#
#   scripts/device-bench.sh forkn
#     issue 18's must-show 2: fork share on, qwen2.5-7b 4-bit, DPO 2x256, 10 steps,
#     N=16 then N=64, 1 rep each, into bench/next/results like `headline`; the
#     arm forks all N clones from one request (fork_requests "one request": one
#     supervisor FORKN, one daemon fork of N clones built before any trains).
#     $OUT/forkn.txt lists each run's fork_requests, fork_s and slowest clone,
#     then per run where the fork's time went (scripts/fork_timeline.py).
#     Goal: fork_s <= 1 s at N=16, <= 5 s at N=64.                       ~5 min
#
#   scripts/device-bench.sh density96 [all|fork|native]
#     issue 18's must-show 1: fork share on, qwen2.5-7b 4-bit, DPO 2x256, 10
#     steps, N=96 (fork), into bench/next/results like `headline`; then the
#     native comparison (native): `bench matrix` native N=16 (lids 0-15, 10
#     steps), and SAMPLE (8) lids drawn from 16..N-1 (seed SEED=18) trained
#     natively by the learner itself at once (8 x ~7.5 GB fits beside
#     nothing else), coordination files in bench/next/density96-native;
#     scripts/density-check.py compares every native lid's per-step losses
#     with the fork run's (the newest fork_n96_s10 result in bench/next/results,
#     else bench/results) and writes $OUT/density96.txt and density96.json.
#     all: both in one call (~4.5 min fork + ~1.5 min native); fork and native
#     split it across two calls (carry the fork result to the second: commit it
#     to bench/results, or KEEP_NEXT=1 with bench/next carried). The native
#     part starts in `all` only when it can end before ~9 minutes.
#     Rehearsal without a GPU: DEVICE=cpu MODEL=tiny CPUS=1 DENSITY_N=6 SAMPLE=2
#     NATIVE_N=2 (the same plumbing on the CPU path; root).
#
# Everything new comes back in $OUT/results.tgz (results + logs) with
# $OUT/bench.log. A sweep that fails is reported and the next one still runs.
#
# Here: scripts/device-pack.sh; on the device, carrying .carry/build.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
OUT=${OUT:-$PWD/device-bench-out}
PLAN=main RESULTS=bench/results LOGDIR=bench/logs TIMEOUT=240
if [[ ${1:-} == forkn ]]; then
  PLAN=forkn PART= RESULTS=bench/next/results LOGDIR=bench/next/logs BUDGET=100000 TIMEOUT=300
  rm -rf bench/next
elif [[ ${1:-} == density96 ]]; then
  PLAN=density96 PART=${2:-all} RESULTS=bench/next/results LOGDIR=bench/next/logs BUDGET=100000 TIMEOUT=480
  case $PART in
    all | fork | native) ;;
    *) echo "usage: $0 density96 [all|fork|native]" >&2; exit 2 ;;
  esac
  [[ ${KEEP_NEXT:-0} == 1 ]] || rm -rf bench/next
elif [[ ${1:-} == headline || ${1:-} == comparison ]]; then
  PLAN=$1 PART=${2:-} RESULTS=bench/next/results LOGDIR=bench/next/logs BUDGET=100000 TIMEOUT=300
  case $PLAN:$PART in
    headline:native | headline:native-16 | headline:fork-low | headline:fork-16 | headline:fork-high | headline:extra | headline:rest) ;;
    comparison:bf16-fork | comparison:bf16-native | comparison:bf16-highn | comparison:mps) ;;
    *) echo "usage: $0 headline native|native-16|fork-low|fork-16|fork-high|extra|rest, or $0 comparison bf16-fork|bf16-native|bf16-highn|mps" >&2
       exit 2 ;;
  esac
  [[ ${KEEP_NEXT:-0} == 1 ]] || rm -rf bench/next
  # No run starts after BUDGET s: the part's longest run and the tar still
  # end before 9 minutes.
  case $PLAN:$PART in
    headline:fork-high) BUDGET=330 ;;
    headline:native-16 | headline:fork-16 | headline:extra) BUDGET=400 ;;
    headline:rest) BUDGET=440 ;;
    headline:*) BUDGET=420 ;;
  esac
  BUDGET=${BUDGET_S:-$BUDGET}  # a plan that puts two parts in one call gives each less
else
  BUDGET=${1:-330}
fi
export SMOLVM_HOME=${SMOLVM_HOME:-/tmp/smolvm-bench-home}
mkdir -p "$OUT" "$RESULTS"
start=$(date +%s)
# MODEL, DEVICE and CPUS: a rehearsal's (the plans' cells are qwen2.5-7b on cuda, 4 CPUs).
MODEL=${MODEL:-qwen2.5-7b} DEVICE=${DEVICE:-cuda} CPUS=${CPUS:-4}
base=(--model "$MODEL" --method dpo --device "$DEVICE" --cpus "$CPUS" --results "$RESULTS" --timeout "$TIMEOUT")
common=("${base[@]}" --load-in-4bit)
# The comparison's bf16 cells: the same learners on the checkpoint's own bf16 weights.
[[ $PLAN == comparison && $PART == bf16-* ]] && common=("${base[@]}")
failed=0
sweep() {  # matrix|highn flags...
  local kind=$1
  shift
  local left=$((BUDGET - ($(date +%s) - start)))
  ((left > 20)) || return 0
  echo "== bench $kind $*" | tee -a "$OUT/bench.log"
  build/smolvm bench "$kind" "${common[@]}" --budget "$left" "$@" >>"$OUT/bench.log" 2>&1 || {
    failed=1
    echo "!! bench $kind $* failed: $(tail -1 "$OUT/bench.log")" | tee -a "$OUT/bench.log"
  }
}
# Issue 18 must-show 1 (the density96 plan above).
density96() {
  local n=${DENSITY_N:-96} native_n=${NATIVE_N:-16} sample=${SAMPLE:-8} seed=${SEED:-18}
  local ten=(--shapes 2x256 --steps 10 --reps 1) rc=0
  [[ $PART == native ]] || sweep matrix --arms fork --share on --ns "$n" "${ten[@]}"
  [[ $PART == fork ]] && return 0
  if [[ $PART == all ]] && (($(date +%s) - start > 400)); then
    echo "!! density96: no time left for the native part in this call: run 'density96 native'" | tee -a "$OUT/bench.log"
    return 1
  fi
  sweep matrix --arms native --ns "$native_n" "${ten[@]}"
  # Lids from native_n..n-1, trained natively by the learner at once, as the
  # bench's native arm runs it (arm_common.cc LearnerArgs) with a --lid.
  local lids dir=bench/next/density96-native model=$SMOLVM_HOME/bench/models/$MODEL
  [[ -d $MODEL ]] && model=$MODEL
  lids=$(python3 -c "import random; print(' '.join(map(str, sorted(random.Random($seed).sample(range($native_n, $n), min($sample, $n - $native_n))))))")
  mkdir -p "$dir"
  echo "== native lids $lids (seed $seed) into $dir" | tee -a "$OUT/bench.log"
  (
    nvidia_lib_path "$BUILD/smolvm-learner"
    pids=()
    for lid in $lids; do
      timeout "$TIMEOUT" "$BUILD/smolvm-learner" train --model "$model" --coord "$dir" --arm native --device "$DEVICE" \
        --method dpo --steps 10 --batch 2 --maxseq 256 --load-in-4bit --lid "$lid" >"$dir/learner_$lid.log" 2>&1 &
      pids+=($!)
    done
    st=0
    for p in "${pids[@]}"; do wait "$p" || st=1; done
    exit $st
  ) || { echo "!! density96: a native learner failed (see $dir/learner_*.log)" | tee -a "$OUT/bench.log"; rc=1; }
  local fork_result native_result
  fork_result=$(ls -t "$RESULTS"/fork_n${n}_s10_*.json bench/results/fork_n${n}_s10_*.json 2>/dev/null | head -1)
  native_result=$(ls -t "$RESULTS"/native_n${native_n}_s10_*.json 2>/dev/null | head -1)
  if [[ -z $fork_result ]]; then
    echo "!! density96: no fork_n${n}_s10 result to compare with" | tee -a "$OUT/density96.txt"
    return 1
  fi
  python3 scripts/density-check.py --fork "$fork_result" ${native_result:+--native "$native_result"} --native-dir "$dir" \
    --expect-n "$n" --out "$OUT/density96.json" | tee "$OUT/density96.txt"
  ((PIPESTATUS[0] == 0)) || rc=1
  return $rc
}
if [[ $PLAN == headline ]]; then
  one20=(--shapes 2x256 --steps 20 --reps 1)
  three20=(--shapes 2x256 --steps 20 --reps 3)
  one10=(--shapes 2x256 --steps 10 --reps 1)
  case $PART in
    native)
      sweep matrix --arms native --ns 1 "${one20[@]}"
      sweep matrix --arms native --ns 4,8 "${three20[@]}"
      sweep matrix --arms native --ns 24 "${one10[@]}" ;;
    native-16)
      sweep matrix --arms native --ns 16 "${three20[@]}" ;;
    fork-low)
      sweep matrix --arms fork --share on --ns 1 "${one20[@]}"
      sweep matrix --arms fork --share on --ns 4,8 "${three20[@]}"
      sweep matrix --arms fork --share on --ns 24 "${one10[@]}" ;;
    fork-16)
      sweep matrix --arms fork --share on --ns 16 "${three20[@]}" ;;
    fork-high)
      sweep matrix --arms fork --share on --ns 32,48,64 "${one10[@]}" ;;
    rest)
      sweep matrix --arms fork --share off --ns 4 "${three20[@]}"
      sweep matrix --arms fork --share on --ns 32 "${one20[@]}"
      sweep matrix --arms native --ns 24 "${one10[@]}" ;;
    extra)
      sweep matrix --arms fork --share off --ns 4 "${three20[@]}"
      sweep matrix --arms native --ns 16 "${one10[@]}"
      sweep matrix --arms fork --share on --ns 16 "${one10[@]}"
      sweep matrix --arms fork --share on --ns 32 "${one20[@]}" ;;
  esac
elif [[ $PLAN == forkn ]]; then
  sweep matrix --arms fork --share on --ns 16,64 --shapes 2x256 --steps 10 --reps 1
  python3 - "$RESULTS" <<'PY' | tee "$OUT/forkn.txt"
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(path))
    ms = max((c.get("ms", 0) for c in r.get("clones", [])), default=0)
    fork_s = r.get("fork_s")
    fork_s = float("nan") if fork_s is None else fork_s
    print(f"n={r.get('n')} fork_requests={r.get('fork_requests')!r} fork_s={fork_s:.3f} "
          f"clones={len(r.get('clones', []))} slowest_clone_ms={ms:.1f} done={r.get('learners_done')}/{r.get('n')}")
PY
  # Where each fork's time went (per-clone steps; scripts/fork_timeline.py).
  for d in "$LOGDIR"/fork_n*; do
    [[ -d $d ]] || continue
    echo "== $(basename "$d")"
    python3 scripts/fork_timeline.py "$(ls "$d"/*-g.log | head -1)" "$d/cuda-daemon.log"
    grep -hE "fork ahead: session|fork of session|clone\(s\) in one request" "$d"/cuda-daemon.log "$d"/*-g.log
  done 2>&1 | tee -a "$OUT/forkn.txt"
elif [[ $PLAN == density96 ]]; then
  density96 || failed=1
elif [[ $PLAN == comparison ]]; then
  one20=(--shapes 2x256 --steps 20 --reps 1)
  case $PART in
    bf16-fork)
      sweep matrix --arms fork --share on --ns 8 --shapes 2x256 --steps 20 --reps 3
      sweep matrix --arms native --load-in-4bit --ns 8 --shapes 2x256 --steps 20 --reps 3
      sweep matrix --arms fork --share on --ns 16 "${one20[@]}"
      sweep matrix --arms fork --share on --ns 24,32 --shapes 2x256 --steps 10 --reps 1 ;;
    bf16-native)
      sweep highn --arms native --ns 1,4,8,9 "${one20[@]}" ;;
    bf16-highn)
      sweep highn --arms fork --share on --ns "${HIGHN_NS:-48,64,96,100,104}" --shapes 2x256 --steps 10 --reps 1 ;;
    mps)
      sweep matrix --arms native --mps --ns 4,8,16 "${one20[@]}"
      sweep matrix --arms native --ns 4,8,16 "${one20[@]}" ;;
  esac
else
  ratio=(--shapes 2x256 --steps 20 --reps 3)
  single=(--shapes 2x256 --steps 20 --reps 1)
  sweep matrix --arms native --ns 4,8,16 "${ratio[@]}"
  sweep matrix --arms fork --share on --ns 4,8,16 "${ratio[@]}"
  sweep matrix --arms fork --share off --ns 4 "${ratio[@]}"
  sweep matrix --arms native --ns 1 "${single[@]}"
  sweep matrix --arms fork --share on --ns 1,32 "${single[@]}"
  sweep highn --share on --batch 2 --maxseq 256 --steps 10
fi
if [[ $PLAN != main ]]; then  # every new result must carry what its build measured itself
  for f in "$RESULTS"/*.json; do
    [[ -e $f ]] || continue
    grep -qE '"schema": *[2-9]' "$f" || { echo "!! $f: not written by a schema-2 build (no t_done of its own)" | tee -a "$OUT/bench.log"; failed=1; }
  done
fi
build/smolvm bench summarize "$RESULTS" | tee "$OUT/summary.txt"
build/smolvm bench census "$RESULTS" | tail -1 | tee -a "$OUT/summary.txt"
tar czf "$OUT/results.tgz" "$RESULTS" "$LOGDIR" $([[ -d bench/next/density96-native ]] && echo bench/next/density96-native) 2>/dev/null
exit $failed
