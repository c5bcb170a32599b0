#!/usr/bin/env bash
# The torch learner forked (issue 14, must-show 2): `smolvm bench run
# --learner torch` (bench/peers/peft_dpo.py: torch + transformers + PEFT, DPO
# 2x256, bf16 base, 20 steps, the learners' data and lids) on the qwen2.5-7b
# preset, fork arm --share on (a golden --cuda machine given the torch venv
# read-only loads the model once under smolvm.torch.frozen() and waits at
# smolvm.forkpoint(); N clones train lids 0..N-1) against the native arm (N
# learner processes). One device call per PART, each under 9 minutes:
#
#   smoke     qwen2.5-0.5b, 10 steps: native N=2, fork N=2 (the path works)  ~3 min
#   native-4  7B native N=4, 3 reps (makes the 7B model first)              ~6 min
#   native-8  7B native N=8, 3 reps (8 x ~18 GiB may not fit: then it is
#             recorded incomplete, which is a result)                        ~7 min
#   fork-4    7B fork N=4, 3 reps, then N=16, 1 rep                          ~7 min
#   fork-8    7B fork N=8, 3 reps                                            ~6 min
#   fork-16   7B fork N=16, 1 rep (the clones' fork times after a change)    ~2.5 min
#
# After each part, bench/peers/torch_fork_check.py checks everything in the
# results directory so far (each clone's losses against the native learner
# with its lid, span tok/s fork / native per N, per-clone NVML memory against
# the native learners' peak minus the base, the daemon's fork time per clone,
# nan) — on the device over this part's runs, and here over all parts once
# their results are unpacked:
#   tar xzf <files_at>/torch-fork-results.tgz -C bench   (into bench/torch-fork/)
#   python3 bench/peers/torch_fork_check.py bench/torch-fork/results
#   build/smolvm bench summarize bench/torch-fork/results
#
# Then, per fork run, the log lines that decide memory and fork time (see
# "what decides" below; docs/torch.md "Reading a fork's memory and time").
#
# Usage (repository root, root, build/ or .carry/build carried):
#   OUT=DIR scripts/device-torch-fork.sh PART
# Estimates assume the 7B model is made once per part (`smolvm-learner
# make-model` into $SMOLVM_HOME on a fresh machine, inside the first run);
# each rep is its own `bench run`, and a rep starts only while one more run as
# long as the last fits in BUDGET_S, so a call ends within 9 minutes.
# Env: PY (default /opt/torch/.venv/bin/python3), CPUS (per learner, 4),
#      TIMEOUT (s per run, 240), BUDGET_S (s, 480).
# Writes to $OUT (4 files): torch-fork.txt (progress, the bench's lines, the
# checks), torch-fork-results.tgz (results/ and logs/ of this part, the
# learners' events and the daemon's log among them), torch-fork-check.json,
# torch-fork-records.tar (records/torch-fork_<stamp>.json from
# scripts/device-record.py: `tar -xf torch-fork-records.tar -C bench`).
# Rehearsal without a GPU or torch (the plumbing, the checks, the records):
#   SMOLVM_TORCH_DRY_RUN=1 PY=/usr/bin/python3 OUT=DIR scripts/device-torch-fork.sh smoke
# runs the learner's dry-run mode on the CPU path (tiny model, 1 CPU each).
# Exit: 0 every run finished and no check failed; 1 otherwise; 2 cannot run
# here (not root, no build, no torch at $PY).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
PART=${1:-}
case $PART in
  smoke | native-4 | native-8 | fork-4 | fork-8 | fork-16) ;;
  *) echo "usage: OUT=DIR $0 smoke|native-4|native-8|fork-4|fork-8|fork-16" >&2; exit 2 ;;
esac
OUT=${OUT:-$PWD/device-torch-fork-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PY=${PY:-/opt/torch/.venv/bin/python3}
CPUS=${CPUS:-4}
TIMEOUT=${TIMEOUT:-240}
BUDGET_S=${BUDGET_S:-480}
LOG_FILE=$OUT/torch-fork.txt
LOG_TAG=torch-fork-$PART
: >"$LOG_FILE"
[[ $(id -u) == 0 ]] || { log "cannot run: bench run needs root"; exit 2; }
find_build || { log "cannot run: no smolvm build (carry build/ or .carry/build)"; exit 2; }
DRY=${SMOLVM_TORCH_DRY_RUN:-0} DEVICE=cuda SMOKE_MODEL=qwen2.5-0.5b
if [[ $DRY == 1 ]]; then
  DEVICE=cpu SMOKE_MODEL=tiny CPUS=1
  log "rehearsal: the learner's dry-run mode on the CPU path (no torch, no GPU)"
else
  "$PY" -c 'import torch, transformers, peft' 2>/dev/null || { log "cannot run: $PY cannot import torch, transformers and peft"; exit 2; }
fi

make_workdir device-torch-fork
T=$W
W=$T/torch-fork
mkdir -p "$W/results"
export SMOLVM_HOME=${SMOLVM_HOME:-/tmp/smolvm-torch-fork-home}
export SMOLVM_TORCH_LEARNER=$PWD/bench/peers/peft_dpo.py
mkdir -p "$SMOLVM_HOME"
log "part $PART: build $BUILD, python $PY ($("$PY" -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)' 2>/dev/null || echo no torch)), GPU memory.used $(smi_used) MiB"

common=(--learner torch --python "$PY" --method dpo --device "$DEVICE" --batch 2 --maxseq 256 --cpus "$CPUS"
        --results "$W/results" --timeout "$TIMEOUT")
seven=(--model qwen2.5-7b --steps 20)
failed=0
start=$SECONDS
last=0  # seconds the last run took: a rep starts only when 1.3 of those (+20 s) fit in BUDGET_S
run() {  # ARM N REPS [flags...]: REPS runs of one rep each
  local arm=$1 n=$2 reps=$3 k t
  shift 3
  for k in $(seq "$reps"); do
    if ((SECONDS - start + last * 13 / 10 + 20 > BUDGET_S)); then
      log "skipped $arm N=$n rep $k/$reps: $((SECONDS - start)) s spent, the last run took ${last} s, budget ${BUDGET_S} s"
      failed=1
      return
    fi
    log "bench run --arm $arm --n $n (rep $k/$reps) $*"
    t=$SECONDS
    "$BUILD/smolvm" bench run --arm "$arm" --n "$n" --reps 1 "${common[@]}" "$@" >>"$LOG_FILE" 2>&1 || {
      failed=1
      log "!! bench run --arm $arm --n $n failed: $(tail -1 "$LOG_FILE")"
    }
    last=$((SECONDS - t))
    log "$(grep -E '^wall=' "$LOG_FILE" | tail -1) (${last} s)"
  done
}
case $PART in
  smoke)
    run native 2 1 --model "$SMOKE_MODEL" --steps 10
    run fork 2 1 --model "$SMOKE_MODEL" --steps 10 --share on ;;
  native-4) run native 4 3 "${seven[@]}" ;;
  native-8) run native 8 3 "${seven[@]}" ;;
  fork-4)
    run fork 4 3 "${seven[@]}" --share on
    run fork 16 1 "${seven[@]}" --share on ;;
  fork-8) run fork 8 3 "${seven[@]}" --share on ;;
  fork-16) run fork 16 1 "${seven[@]}" --share on ;;
esac

log "checks over this part's runs (native and fork meet here only in smoke; run the check over all parts at home)"
python3 bench/peers/torch_fork_check.py "$W/results" --json "$OUT/torch-fork-check.json" | tee -a "$LOG_FILE"
check_rc=${PIPESTATUS[0]}
[[ $PART == smoke && $check_rc != 0 ]] && failed=1
"$BUILD/smolvm" bench summarize "$W/results" >>"$LOG_FILE" 2>&1

# What decides the memory and fork-time checks, from each fork run's logs:
# the golden's base bytes outside frozen memory and torch's memory by pool at
# the forkpoint; the golden worker's private chunks and what lives in them;
# the pooled workers' library preload; each clone's build; when the golden
# got its orders; each clone's own split of its fork (order to os.fork,
# os.fork, child chain to attached); the daemon's descriptor caps and limits
# and the golden's chunk count exported ahead (issue 29).
for d in "$W"/logs/torch-fork_*; do
  [[ -d $d ]] || continue
  log "fork run $(basename "$d"): what decides memory and fork time"
  grep -hE "peft_dpo: golden: base|smolvm.forkpoint: memory:" "$d"/*-g.log 2>/dev/null | sed 's/^/  golden: /' | tee -a "$LOG_FILE"
  grep -hE "fork prepare: private|libraries preloaded|preload of .* failed|fork preload of session|supervisor's forkpoint|clone build|orders sent to the golden|fork: clone|descriptors: RLIMIT|daemon: capabilities|chunks exported|descriptors not kept|--max-fds" \
    "$d"/cuda-daemon.log 2>/dev/null | sed 's/^/  daemon: /' | tee -a "$LOG_FILE"
  grep -hE "peft_dpo: clone [0-9]+: fork order" "$d"/*-c*.log 2>/dev/null | sed 's/^/  clone: /' | tee -a "$LOG_FILE"
done

# The learners' events, the machines' and the daemon's logs come back; the
# learners' own logs only in the last 200 lines each.
find "$W/logs" -name '*.log' -size +1M -exec sh -c 'tail -n 200 "$1" >"$1.tail" && mv "$1.tail" "$1"' _ {} \; 2>/dev/null
tar -czf "$OUT/torch-fork-results.tgz" -C "$T" torch-fork/results torch-fork/logs
summary=$(cat "$OUT/torch-fork-check.json" 2>/dev/null || echo '{}')
python3 scripts/device-record.py torch-fork --out "$W" --command "OUT=\$OUT scripts/device-torch-fork.sh $PART" \
  --summary "$summary" "$W"/results/*.json >>"$LOG_FILE" 2>&1 || log "device-record.py failed"
tar -cf "$OUT/torch-fork-records.tar" -C "$W" records 2>/dev/null || log "no record written"
log "done in $((SECONDS - start)) s; GPU memory.used $(smi_used) MiB"
exit "$failed"
