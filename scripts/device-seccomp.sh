#!/usr/bin/env bash
# Derives the workers' seccomp allowlist on the GPU machine (issue 15): every
# daemon started here runs its workers in learn mode (SMOLVM_WORKER_SECCOMP=learn:
# a call outside src/worker/worker_seccomp.cc's table runs, and its name is
# appended to one file), as unprivileged per-tenant uids, while these run:
#
#   check    the gpu-labelled CTest tests, the 7 tests/gpu programs natively and
#            through the shim, the concurrent fault (scripts/device-check.sh)
#   fork     4 warm clones of a 1 GiB golden, share on and auto, a clone's
#            write fault (scripts/device-fork.sh --phase clones 1024 128 4)
#   learner  the learner (tiny preset, DPO, 4 steps) through the shims, forked
#            once at its forkpoint with --share on (cuBLAS/cuBLASLt in the worker)
#
# Output under $OUT (3 files): seccomp-learned.txt (the union of the calls
# outside the table, one name a line: add each to the table with who needs it),
# seccomp-summary.txt (per phase: PASS/FAIL and the calls it added), logs.tgz.
# About 5 minutes, at most ~9 (each phase is time-boxed). Run from the repo
# root with build/ or .carry/build.
# Exit status: 0 when every phase passed (the learned list may still be
# non-empty), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/lib.sh
find_build
OUT=${OUT:-$ROOT/device-seccomp-out}
mkdir -p "$OUT"
make_workdir device-seccomp
on_exit daemon_stop
chmod 0755 "$W"
LEARN=$W/learned.txt
: >"$LEARN"
chmod 0666 "$LEARN"  # opened by workers before they drop their uid; 0666 for a daemon that is not root
export SMOLVM_WORKER_SECCOMP=learn SMOLVM_WORKER_SECCOMP_LEARN=$LEARN
SUM=$OUT/seccomp-summary.txt
FAILED=0
LOG_TAG=device-seccomp LOG_FILE=$SUM
learned() { sort -u "$LEARN" | grep -v '^$' | tr '\n' ' '; }
# phase NAME STATUS: records the phase and what it added to the learned list.
before=""
phase_done() {
  local now
  now=$(learned)
  log "$1: $2; learned so far: ${now:-(none)}"
  [[ $2 == PASS || $2 == SKIP* ]] || FAILED=1
  before=$now
}
log "build $(readlink -f build); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
log "uid map: $(tr -s ' ' </proc/self/uid_map | tr '\n' ';')"

# --- check: GPU tests, programs, concurrent fault ------------------------------
OUT=$W/check timeout 280 scripts/device-check.sh --phase env,gpu-tests,programs,concurrent --deadline 260 \
  >"$W/check.log" 2>&1
rc=$?
grep -E "^(env|gpu-tests|programs|concurrent)" "$W/check/summary.txt" 2>/dev/null | tee -a "$SUM"
phase_done check "$([[ $rc == 0 ]] && echo PASS || echo "FAIL rc=$rc")"

# --- fork: warm clones, share on and auto -------------------------------------
OUT=$W/fork ARMS=on,auto timeout 120 scripts/device-fork.sh --phase clones 1024 128 4 >"$W/fork.log" 2>&1
rc=$?
grep -E "clone reports|clones:" "$W/fork/fork-summary.txt" 2>/dev/null | tee -a "$SUM"
ok=$(grep -c "4/4 clone reports" "$W/fork/fork-summary.txt" 2>/dev/null)
phase_done fork "$([[ $rc == 0 && ${ok:-0} -ge 1 ]] && echo PASS || echo "FAIL rc=$rc")"

# --- learner: tiny preset through the shims, one fork -------------------------
phase_learner() {
  local L=$W/learner sock=$W/learner/cuda.sock
  mkdir -p "$L/coord"
  build/smolvm-learner make-model --preset tiny --seed 0 --out "$L/model" >"$L/make-model.log" 2>&1 || return 1
  daemon_start "$sock" "$L/daemon.log" --backend "${BACKEND:-cuda}" --pool 2
  SMOLVM_CUDA_SOCKET=$sock LD_LIBRARY_PATH=$ROOT/build/shim:${LD_LIBRARY_PATH:-} timeout 90 build/smolvm-learner train \
    --model "$L/model" --method dpo --batch 2 --maxseq 64 --steps 4 --device cuda --fork --coord "$L/coord" \
    --arm fork-on >"$L/golden.out" 2>"$L/golden.err" &
  local waiter=$! ok=1 golden=""  # waiter: timeout's pid; golden: the learner's, from the daemon
  for _ in $(seq 600); do
    SMOLVM_CUDA_SOCKET=$sock build/smolvm cuda status --json 2>/dev/null |
      python3 -c "import json,sys; j=json.load(sys.stdin); p=[s['pid'] for s in j['sessions'] if s['state']=='forkpoint']; print(p[0]) if p else sys.exit(1)" \
        >"$L/golden.pid" && { golden=$(cat "$L/golden.pid"); ok=0; break; }
    kill -0 "$waiter" 2>/dev/null || break
    sleep 0.2
  done
  if ((ok == 0)); then
    SMOLVM_CUDA_SOCKET=$sock timeout 60 build/smolvm cuda fork --pid "$golden" --count 1 --share on --wait 30 \
      >"$L/fork.txt" 2>&1 || ok=1
    for _ in $(seq 600); do
      [[ $(grep -l '"done"' "$L/coord"/learner_*.jsonl 2>/dev/null | wc -l) -ge 1 ]] && break
      sleep 0.2
    done
    grep -l '"done"' "$L/coord"/learner_*.jsonl >/dev/null 2>&1 || ok=1
    SMOLVM_CUDA_SOCKET=$sock build/smolvm cuda release --pid "$golden" >>"$L/fork.txt" 2>&1
  fi
  wait "$waiter" || ok=1
  daemon_stop
  return "$ok"
}
if ((SECONDS > 450)); then
  phase_done learner "SKIP (past 450 s: the device call's 600 s would not hold it)"
elif [[ -x build/smolvm-learner ]]; then
  phase_learner
  rc=$?
  phase_done learner "$([[ $rc == 0 ]] && echo PASS || echo "FAIL rc=$rc")"
else
  phase_done learner "FAIL (build/smolvm-learner missing)"
fi

sort -u "$LEARN" | grep -v '^$' >"$OUT/seccomp-learned.txt"
log "learned $(wc -l <"$OUT/seccomp-learned.txt") calls outside the table: $(tr '\n' ' ' <"$OUT/seccomp-learned.txt")"
jail_lines=$( { tar xzf "$W/check/logs.tar.gz" -O 2>/dev/null; cat "$W"/fork/fork-daemon.log "$W"/learner/daemon.log 2>/dev/null; } |
  grep -aE "workers: |cannot enter its jail" | sed 's/^smolvmd\[[0-9]*\] [0-9:.]*: //' | sort | uniq -c | head -6)
log "what the daemons said of their workers' jail:"$'\n'"$jail_lines"
tar czf "$OUT/logs.tgz" -C "$W" . 2>/dev/null
exit "$FAILED"
