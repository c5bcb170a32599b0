#!/usr/bin/env bash
# Issue 31, must-show 2: serve on the GPU. `smolvm serve` (machine driver),
# a pool of a torch golden (scripts/device-serve-golden.py: qwen2.5-0.5b's
# shape, bf16, loaded once under smolvm.torch.frozen()) with min_ready 8,
# leased 8 at a time for 20 rounds, every clone's result back
# (scripts/device-serve.py); then the pool deleted and the GPU's memory
# compared with the warm daemon's level (the daemon started, its worker pool
# up, no session), measured before the pool.
#
# Usage (repository root, root, build/ or .carry/build carried):
#   OUT=DIR scripts/device-serve.sh
# Env: PY (default /opt/torch/.venv/bin/python3), ROUNDS (20), K (8),
#      SLACK_MIB (64: how far above the warm level "back" may be).
# Rehearsal without a GPU (the plumbing: serve, client, rounds, cleanup):
#   SERVE_DRIVER=fake OUT=DIR scripts/device-serve.sh
# Writes $OUT/serve-gpu.json (the rounds' summary and the memory check),
# $OUT/serve.log, $OUT/daemon.log. Exit 0 when every round's results came
# back and memory returned to the warm level; 1 otherwise; 2 cannot run here.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
OUT=${OUT:-$PWD/device-serve-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
LOG_FILE=$OUT/serve.txt
DRIVER=${SERVE_DRIVER:-machine}
PY=${PY:-/opt/torch/.venv/bin/python3}
SLACK_MIB=${SLACK_MIB:-64}
export PY ROUNDS=${ROUNDS:-20} K=${K:-8} SERVE_DRIVER=$DRIVER
find_build || { echo "device-serve: no smolvm build" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "device-serve: needs root (machines)" >&2; exit 2; }
if [[ $DRIVER == machine && ! -x $PY ]]; then echo "device-serve: no torch python at $PY" >&2; exit 2; fi
make_workdir device-serve
export SMOLVM_HOME=$W/home SMOLVM_CUDA_BACKEND=${SMOLVM_CUDA_BACKEND:-cuda}
mkdir -p "$SMOLVM_HOME"
[[ $DRIVER == machine ]] && nvidia_lib_path "$BUILD/smolvm" "$PY"

setsid "$BUILD/smolvm" serve --driver "$DRIVER" >>"$OUT/serve.log" 2>&1 &
SERVE_PID=$!
on_exit "kill -TERM $SERVE_PID 2>/dev/null; wait $SERVE_PID 2>/dev/null; '$BUILD/smolvm' cuda shutdown >/dev/null 2>&1; cp '$SMOLVM_HOME/cuda/daemon.log' '$OUT/daemon.log' 2>/dev/null"
for _ in $(seq 300); do grep -q "serve: listening" "$OUT/serve.log" && break; sleep 0.1; done
grep -q "serve: listening" "$OUT/serve.log" || { log "serve did not start"; cat "$OUT/serve.log"; exit 1; }
if grep -q "without parked forks" "$OUT/serve.log"; then
  log "this build has no lease link (src/machine/lease_link.h): serve cannot park clones"; exit 2
fi
log "serve up (pid $SERVE_PID, driver $DRIVER); GPU used before: $(smi_used) MiB"

warm=""
if [[ $DRIVER == machine ]]; then
  # The warm daemon's level: a --cuda machine starts the daemon; once it is
  # gone the daemon stays warm with its workers and no session.
  "$BUILD/smolvm" machine create --name warmup --cuda -- /bin/true >/dev/null &&
    "$BUILD/smolvm" machine start --name warmup >/dev/null
  sleep 2
  "$BUILD/smolvm" machine rm --name warmup --force >/dev/null
  sleep 3
  warm=$(smi_used)
  log "warm daemon level: ${warm:-?} MiB"
fi

python3 scripts/device-serve.py "$OUT/serve-rounds.json" 2>&1 | tee -a "$LOG_FILE"
rounds_rc=${PIPESTATUS[0]}

after=""
mem_ok=true
if [[ -n $warm ]]; then
  for _ in $(seq 120); do
    after=$(smi_used)
    [[ -n $after ]] && ((after <= warm + SLACK_MIB)) && break
    sleep 0.5
  done
  ((after <= warm + SLACK_MIB)) || mem_ok=false
  log "GPU after delete: ${after:-?} MiB (warm ${warm} MiB, slack ${SLACK_MIB} MiB): $($mem_ok && echo back || echo NOT back)"
fi
python3 - "$OUT/serve-rounds.json" "$OUT/serve-gpu.json" "${warm:-}" "${after:-}" "$mem_ok" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])) if sys.argv[1] else {}
s["warm_mib"] = int(sys.argv[3]) if sys.argv[3] else None
s["after_delete_mib"] = int(sys.argv[4]) if sys.argv[4] else None
s["memory_back"] = sys.argv[5] == "true"
json.dump(s, open(sys.argv[2], "w"), indent=1)
print(json.dumps(s))
PY
((rounds_rc == 0)) && $mem_ok && { log "PASS"; exit 0; }
log "FAIL (rounds rc $rounds_rc, memory back: $mem_ok)"
exit 1
