#!/usr/bin/env bash
# Issue 32, must-show 2: one part of the `lease` record (scripts/device-lease.py
# says what each measures), run in one device call's step:
#   lease  first-step  loop  loop-kept  loop-cold  loop7b  record
# scripts/plans/episodes.plan, episodes-2.plan and episodes-3.plan run them in
# three calls. Each part writes STATE/<part>.json and OUT/parts/<part>.json;
# `record` writes OUT/records/lease_*.json once STATE holds all six (carry
# bench/next, where STATE is, from one call to the next: back here,
# `tar xzf <files_at>/NAME.tgz` and copy NAME/parts/*.json into bench/next/lease/).
#
# For the parts that need it (lease, first-step, loop, loop7b) it starts
# `smolvm serve` (machine driver, the CUDA daemon with CUDA_POOL pooled
# workers) in a fresh SMOLVM_HOME, measures the warm daemon's GPU memory (a
# --cuda machine started and removed: the daemon up, no session) and passes
# it on (WARM_MIB: each part checks memory comes back to it after its pools
# are deleted), and stops serve and the daemon at the end.
#
# Usage (repository root, root, build/ or .carry/build carried):
#   OUT=DIR scripts/device-lease.sh PART
# Env: PY (default /opt/torch/.venv/bin/python3), STATE (default
#   bench/next/lease), BUDGET_S (the part's time box less ~35 s for its
#   clean-up, counted from this script's start; default 300), CUDA_POOL (16),
#   and device-lease.py's (K, ITERATIONS, ROUNDS, STALL_S, TAIL_S, ...).
# Rehearsal without a GPU (the plumbing; the figures mean nothing):
#   BACKEND=fake OUT=DIR scripts/device-lease.sh PART   (PY=/usr/bin/python3,
#   no torch: the learner's --stand-in, the latency golden's --no-torch)
# Exit: 0 the part ran (record: the record was written), 1 it failed, 2 it
# cannot run here, 3 (record) parts are missing.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
PART=${1:-}
OUT=${OUT:-$PWD/device-lease-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
STATE=${STATE:-$PWD/bench/next/lease}
mkdir -p "$STATE" && STATE=$(cd "$STATE" && pwd)
LOG_FILE=$OUT/lease.txt
BACKEND=${BACKEND:-cuda}
if [[ $BACKEND == fake ]]; then
  export REHEARSE=1 PY=${PY:-/usr/bin/python3}
else
  export PY=${PY:-/opt/torch/.venv/bin/python3}
fi
case $PART in
  lease | first-step | loop | loop7b) need_serve=1 ;;
  loop-kept | loop-cold) need_serve=0 ;;
  record) exec python3 scripts/device-lease.py record --out "$OUT" --state "$STATE" ;;
  *) echo "device-lease: usage: scripts/device-lease.sh lease|first-step|loop|loop-kept|loop-cold|loop7b|record" >&2; exit 2 ;;
esac
find_build || { echo "device-lease: no smolvm build" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "device-lease: needs root (machines)" >&2; exit 2; }
[[ -x $PY ]] || { echo "device-lease: no python at $PY" >&2; exit 2; }
make_workdir device-lease
export SMOLVM_HOME=$W/home SMOLVM_CUDA_BACKEND=$BACKEND SMOLVM_CUDA_POOL=${CUDA_POOL:-16}
mkdir -p "$SMOLVM_HOME"
[[ $BACKEND == cuda ]] && nvidia_lib_path "$BUILD/smolvm" "$PY"
log "part $PART on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU'); GPU used: $(smi_used) MiB"

# Whatever a failed part left in this home (serve does not own its machines).
remove_machines() {
  local m
  for m in $("$BUILD/smolvm" machine list --json 2>/dev/null | python3 -c 'import json,sys; [print(m["name"]) for m in json.load(sys.stdin) if not m["golden"]]' 2>/dev/null); do
    log "removing machine $m (left behind)"
    "$BUILD/smolvm" machine rm --name "$m" --force --cascade >/dev/null 2>&1
  done
}

if ((need_serve)); then
  setsid "$BUILD/smolvm" serve --driver machine >>"$OUT/serve.log" 2>&1 &
  SERVE_PID=$!
  on_exit "kill -TERM $SERVE_PID 2>/dev/null; wait $SERVE_PID 2>/dev/null; remove_machines; '$BUILD/smolvm' cuda shutdown >/dev/null 2>&1; cp '$SMOLVM_HOME/cuda/daemon.log' '$OUT/daemon.log' 2>/dev/null"
  for _ in $(seq 300); do grep -q "serve: listening" "$OUT/serve.log" && break; sleep 0.1; done
  grep -q "serve: listening" "$OUT/serve.log" || { log "serve did not start"; cat "$OUT/serve.log"; exit 1; }
  if grep -q "without parked forks" "$OUT/serve.log"; then
    log "this build has no lease link: serve cannot park clones"; exit 2
  fi
  # The warm daemon's level: a --cuda machine starts the daemon (and its
  # pooled workers); once it is gone the daemon stays with no session.
  "$BUILD/smolvm" machine create --name warmup --cuda -- /bin/true >/dev/null &&
    "$BUILD/smolvm" machine start --name warmup >/dev/null
  sleep 2
  "$BUILD/smolvm" machine rm --name warmup --force >/dev/null
  for _ in $(seq 30); do  # the pooled workers' contexts made
    [[ $BACKEND == fake ]] && break
    a=$(smi_used); sleep 1; b=$(smi_used)
    [[ -n $a && $a == "$b" ]] && break
  done
  export WARM_MIB=$(smi_used)
  log "serve up (pid $SERVE_PID); warm daemon level: ${WARM_MIB:-?} MiB"
fi

# The budget counts from this script's start: serve's start and the warm
# level's measure came out of the same time box.
export BUDGET_S=$((${BUDGET_S:-300} - SECONDS)) SMOLVM_BIN=$BUILD/smolvm
python3 scripts/device-lease.py "$PART" --out "$OUT" --state "$STATE" --work "$W" 2>&1 | tee -a "$LOG_FILE"
rc=${PIPESTATUS[0]}
((rc == 0)) && { log "PASS: $PART"; exit 0; }
log "FAIL: $PART (rc $rc)"
if ((need_serve)); then  # serve's own account of its pools' failures
  grep -E "failed|refill" "$OUT/serve.log" | tail -5 | sed 's/^/  /'
fi
exit 1
