#!/usr/bin/env bash
# --cuda machines on the GPU machine (issue 6 must-show 5): a golden machine
# runs `smolvm-learner train --fork`, starts --forkable, `machine fork
# --share-weights` makes COUNT clone machines one at a time (end-to-end fork
# latency: the CLI call until the clone's CUDA session is attached and its
# first call, the handshake, served), the clones train, `smolvm cuda status`
# shows the shared chunks, every session's worker sits in its machine's cgroup
# (v2), and the GPU is back at its starting memory after the daemon stops.
#
# Runs from the repository root as root, with build/ (or .carry/build from
# scripts/device-pack.sh) carried. Needs nothing else on the device.
# Usage: scripts/device-machines.sh [PRESET=qwen2.5-0.5b] [STEPS=20] [COUNT=4]
# Env: LOAD4=1 (--load-in-4bit), MODELS (/tmp/smolvm_learner_models),
#      CPUS (2 per machine), OUT (results; default ./device-machines-out),
#      DEADLINE (seconds for the whole run, default 540).
#      FAKE=1: the same steps on the fake backend with tests/shim's prog_fork
#      as the golden (no GPU; checks this script's plumbing anywhere).
# Results: $OUT/machines-summary.txt (human), machines-summary.json, logs.
# Exit 0 only when every check passed; every failed check is a FAIL line.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/lib.sh
PRESET=${1:-qwen2.5-0.5b} STEPS=${2:-20} COUNT=${3:-4}
LOAD4=${LOAD4:-0} CPUS=${CPUS:-2} DEADLINE=${DEADLINE:-540} FAKE=${FAKE:-0}
MODELS=${MODELS:-/tmp/smolvm_learner_models}
OUT=${OUT:-$ROOT/device-machines-out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUILD=""
find_build
TAG=$PRESET$([[ $LOAD4 == 1 ]] && echo -4bit)
((FAKE)) && TAG=fake
SUM=$OUT/machines-summary-$TAG.txt
T_START=$(date +%s)
FAILS=0
declare -A RESULT

LOG_TAG=device-machines LOG_FILE=$SUM
fail() { FAILS=$((FAILS + 1)); log "FAIL: $*"; }
pass() { log "ok: $*"; }
left() { echo $((DEADLINE - ($(date +%s) - T_START))); }
now_ms() { date +%s%3N; }
jq_py() { python3 -c "import json,sys; d=json.load(sys.stdin); $1" 2>/dev/null; }

: >"$SUM"
log "preset=$PRESET 4bit=$LOAD4 steps=$STEPS count=$COUNT cpus=$CPUS build=$BUILD out=$OUT"
[[ -x $BUILD/smolvm && ( $FAKE == 1 || -x $BUILD/smolvm-learner ) && -f $BUILD/shim/libcudart.so.13 ]] || {
  fail "no built tree with smolvm, smolvm-learner and shim/ at $BUILD (carry build/ or .carry/build)"; exit 1; }
[[ $(id -u) == 0 ]] || { fail "machines need root"; exit 1; }
((FAKE)) || command -v nvidia-smi >/dev/null || { fail "no nvidia-smi: not a GPU machine"; exit 1; }
[[ $(stat -fc %T /sys/fs/cgroup) == cgroup2fs ]] && log "cgroup: v2" || log "cgroup: v1 hierarchies"

# The daemon's workers load NVIDIA's real libcublas/libcublasLt (the guests
# get the shims); the daemon inherits this path from the CLI through the
# supervisor. Find them when the loader cannot.
((FAKE)) || nvidia_lib_path "$BUILD/smolvm-learner"
((FAKE)) || log "host libs for the workers: $(ldd "$BUILD/smolvm-learner" | grep -E 'cublas|cudart' | tr -s ' \t' ' ' | tr '\n' ';')"

make_workdir device-machines
export SMOLVM_HOME=$W/home SMOLVM_CGROUP_PARENT=smolvm-dev-$$ SMOLVM_CUDA_BACKEND=$( ((FAKE)) && echo fake || echo cuda)
export SMOLVM_CUDA_POOL=$((COUNT + 1)) SMOLVM_CUDA_SPARES=1  # warm workers for the golden and each clone
unset SMOLVM_CUDA_SOCKET SMOLVM_SHIM_DIR
SMOLVM=$BUILD/smolvm
mkdir -p "$SMOLVM_HOME"
cleanup() {
  "$SMOLVM" machine rm --name gold --cascade --grace 2 >>"$OUT/cli-$TAG.log" 2>&1 ||
    "$SMOLVM" machine rm --name gold --force --grace 0 >>"$OUT/cli-$TAG.log" 2>&1
  for i in $(seq 0 $((COUNT - 1))); do "$SMOLVM" machine rm --name "kid-$i" --force --grace 0 >/dev/null 2>&1; done
  cp -f "$SMOLVM_HOME/cuda/daemon.log" "$OUT/daemon-$TAG.log" 2>/dev/null
  "$SMOLVM" cuda shutdown --grace 10 >>"$OUT/cli-$TAG.log" 2>&1
  rmdir /sys/fs/cgroup/"$SMOLVM_CGROUP_PARENT" 2>/dev/null
  for h in /sys/fs/cgroup/*/; do rmdir "$h$SMOLVM_CGROUP_PARENT" 2>/dev/null; done
}
on_exit cleanup
mem0=$(smi_used)
((FAKE)) && mem0=0
log "GPU memory.used at start: $mem0 MiB"

# 1. The model (synthetic, seeded).
MODEL=$MODELS/$PRESET
((FAKE)) && MODEL=$W/no-model && mkdir -p "$MODEL" && touch "$MODEL/config.json"
if [[ ! -f $MODEL/config.json ]]; then
  t0=$(now_ms)
  mkdir -p "$MODELS"
  "$BUILD/smolvm-learner" make-model --preset "$PRESET" --seed 0 --out "$MODEL" >"$OUT/make-model-$TAG.log" 2>&1 ||
    { fail "make-model $PRESET (see make-model-$TAG.log)"; exit 1; }
  log "made $MODEL in $(($(now_ms) - t0)) ms"
fi
chmod -R a+rX "$MODEL"
COORD=$W/coord
mkdir -p "$COORD" && chmod 0777 "$COORD"
cmd=(/opt/smolvm/smolvm-learner train --model /model --fork --coord /coord --steps "$STEPS" --batch 2 --maxseq 256 --lid 100)
[[ $LOAD4 == 1 ]] && cmd+=(--load-in-4bit)
((FAKE)) && cmd=(/opt/smolvm/tests/shim/bin/prog_fork /coord 96 4)
# A clone is done when it wrote its result.
clone_done() {
  if ((FAKE)); then grep -q "cow=1" "$COORD/clone$1.txt" 2>/dev/null; else grep -q '"done"' "$COORD/learner_$1.jsonl" 2>/dev/null; fi
}

# 2. The golden machine: create --cuda, start --forkable (the daemon starts on demand).
hold=()
((FAKE)) && hold=(-e PROG_FORK_HOLD=1)  # the fake clones wait for $COORD/exit
"$SMOLVM" machine create --name gold --cpus "$CPUS" --cuda "${hold[@]}" -v "$BUILD:/opt/smolvm:ro" -v "$MODEL:/model:ro" \
  -v "$COORD:/coord" -- "${cmd[@]}" >>"$OUT/cli-$TAG.log" 2>&1 ||
  { fail "machine create (see cli-$TAG.log)"; exit 1; }
t0=$(now_ms)
"$SMOLVM" machine start --name gold --forkable >>"$OUT/cli-$TAG.log" 2>&1 || {
  "$SMOLVM" machine logs --name gold >"$OUT/gold-$TAG.log" 2>&1
  fail "machine start: $(tail -1 "$OUT/cli-$TAG.log") (logs: cli-$TAG.log, gold-$TAG.log, daemon-$TAG.log)"
  exit 1
}
log "machine start --forkable: $(($(now_ms) - t0)) ms (daemon started on demand: $(jq_py 'print(d["pid"])' <"$SMOLVM_HOME/cuda/daemon.json"))"
# The golden loads and warms up, then waits in smolvmForkpoint().
at_fp=0
while (($(left) > 60)); do
  st=$("$SMOLVM" machine list --json | jq_py 'm=[x for x in d if x["name"]=="gold"][0]; print(m["state"], m.get("detail",""))')
  [[ $st == "running at forkpoint" ]] && { at_fp=1; break; }
  [[ $st == running* ]] || break
  sleep 0.2
done
"$SMOLVM" machine logs --name gold >"$OUT/gold-$TAG.log" 2>&1
((at_fp)) || { fail "the golden did not reach its forkpoint (state: $st; see gold-$TAG.log)"; exit 1; }
log "golden at its forkpoint $(($(now_ms) - t0)) ms after start"
# Warm workers: pre-started contexts, so the forks below do not pay for one.
for _ in $(seq 300); do
  n=$("$SMOLVM" cuda status --json | jq_py 'print(d["ready_workers"])')
  [[ ${n:-0} -ge $COUNT ]] && break
  sleep 0.1
done
log "pool: ${n:-0} ready workers"
"$SMOLVM" cuda status >"$OUT/status-before-$TAG.txt" 2>&1

# check_sessions MACHINE...: each has a session whose worker is in its cgroup;
# a clone's session is role clone and shares chunks. Appends to check-status.
check_sessions() {
  local res
  "$SMOLVM" cuda status --json >"$W/status.json" 2>&1
  res=$(python3 - "$W/status.json" "$SMOLVM_CGROUP_PARENT" "$@" 2>&1 <<'EOF2'
import json, sys, os, glob
st = json.load(open(sys.argv[1])); parent = sys.argv[2]
by = {s["machine"]: s for s in st["sessions"]}
def cgroup_procs(m):
    for base in ["/sys/fs/cgroup"] + glob.glob("/sys/fs/cgroup/*/"):
        p = os.path.join(base, parent, m, "cgroup.procs")
        if os.path.exists(p):
            return set(int(x) for x in open(p).read().split())
    return set()
for m in sys.argv[3:]:
    s = by.get(m)
    if not s:
        print("FAIL no session of machine", m); continue
    inside = s["worker_pid"] in cgroup_procs(m)
    print("%s role=%s shared=%d (%.0f MiB) private=%d (%.0f MiB) worker %d in its cgroup: %s" % (
        m, s["role"], s["shared_chunks"], s["shared_mib"], s["private_chunks"], s["private_mib"], s["worker_pid"], inside))
    if not inside: print("FAIL worker of", m, "not in its cgroup")
    if m != "gold" and (s["role"] != "clone" or s["shared_chunks"] == 0):
        print("FAIL", m, "is not a clone sharing chunks")
EOF2
)
  echo "$res" >>"$OUT/check-status-$TAG.txt"
  echo "$res" | sed 's/^/    /' | tee -a "$SUM" >/dev/null
}
: >"$OUT/check-status-$TAG.txt"

# 3. Forks, one CLI call each, timed end to end.
lat=()
for i in $(seq 0 $((COUNT - 1))); do
  t0=$(now_ms)
  if "$SMOLVM" machine fork --golden gold --name "kid-$i" --share-weights --timeout 60 >>"$OUT/cli-$TAG.log" 2>&1; then
    ms=$(($(now_ms) - t0))
    lat+=("$ms")
    log "fork kid-$i: CLI call -> clone session attached: $ms ms"
    check_sessions gold "kid-$i"
  else
    fail "machine fork kid-$i: $(tail -1 "$OUT/cli-$TAG.log") (see cli-$TAG.log, gold-$TAG.log, daemon-$TAG.log)"
    COUNT=$i  # the checks below cover the clones that exist
    break
  fi
done
"$SMOLVM" machine logs --name gold >"$OUT/gold-$TAG.log" 2>&1
grep -E "GPU fork into|fork: clone" "$OUT/gold-$TAG.log" | tee -a "$SUM" >/dev/null
if ((${#lat[@]})); then
  med=$(printf '%s\n' "${lat[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:int((a[NR/2]+a[NR/2+1])/2)}')
  log "fork latency end to end (ms): ${lat[*]}; median $med (goal <= 250)"
  RESULT[fork_ms_median]=$med
  RESULT[fork_ms]=$(IFS=,; echo "${lat[*]}")
fi

# 4. The daemon's view: shared chunks, sessions by machine, workers in cgroups.
"$SMOLVM" cuda status >"$OUT/status-$TAG.txt" 2>&1
cat "$OUT/status-$TAG.txt" | tee -a "$SUM" >/dev/null
((FAKE)) || nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >"$OUT/apps-$TAG.csv" 2>&1
bad=$(grep -c FAIL "$OUT/check-status-$TAG.txt" 2>/dev/null)
((${bad:-1} == 0)) && pass "every session in its machine's cgroup; every clone shared the golden's chunks" ||
  fail "status checks (check-status-$TAG.txt)"

((FAKE)) && touch "$COORD/exit"

# 5. The clones train (lid = clone index) to the end.
done_n=0
while (($(left) > 30)); do
  done_n=0
  for i in $(seq 0 $((COUNT - 1))); do clone_done "$i" && done_n=$((done_n + 1)); done
  ((done_n >= COUNT)) && break
  alive=0
  for i in $(seq 0 $((COUNT - 1))); do
    [[ $("$SMOLVM" machine list --json | jq_py "print([x['state'] for x in d if x['name']=='kid-$i'][0])") == running ]] && alive=1
  done
  ((alive)) || break
  sleep 1
done
mkdir -p "$OUT/coord-$TAG" && cp "$COORD"/learner_*.jsonl "$OUT/coord-$TAG/" 2>/dev/null
for i in $(seq 0 $((COUNT - 1))); do
  "$SMOLVM" machine logs --name "kid-$i" >"$OUT/kid-$i-$TAG.log" 2>&1
  if ((FAKE)); then
    line=$(clone_done "$i" && cat "$COORD/clone$i.txt")
  else
    line=$(grep '"done"' "$COORD/learner_$i.jsonl" 2>/dev/null | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print("tok_s=%.0f loss0=%.4f lossN=%.4f peak_gb=%s" % (d["tok_s"], d["loss0"], d["lossN"], d.get("peak_gb")))' 2>/dev/null)
  fi
  if [[ -n $line ]]; then
    log "kid-$i trained: $line"
    [[ $line == *nan* ]] && fail "kid-$i has nan"
  else
    fail "kid-$i did not finish training (see kid-$i-$TAG.log)"
  fi
done
RESULT[clones_done]=$done_n
"$SMOLVM" machine list >"$OUT/list-$TAG.txt" 2>&1

# 6. Teardown: machines, daemon; the GPU back where it started.
"$SMOLVM" machine rm --name gold --cascade --grace 5 >>"$OUT/cli-$TAG.log" 2>&1 || fail "machine rm --cascade"
cp -f "$SMOLVM_HOME/cuda/daemon.log" "$OUT/daemon-$TAG.log" 2>/dev/null
"$SMOLVM" cuda shutdown --grace 10 >>"$OUT/cli-$TAG.log" 2>&1 || fail "cuda shutdown"
sleep 1
mem1=$(smi_used)
((FAKE)) && mem1=0
log "GPU memory.used after the daemon stopped: $mem1 MiB (start $mem0 MiB)"
[[ -n $mem0 && -n $mem1 ]] && (((mem1 - mem0) <= 64)) && pass "GPU memory back at start" || fail "GPU memory not back at start"
python3 - "$OUT/machines-summary-$TAG.json" <<EOF
import json, sys
json.dump({"preset": "$PRESET", "load_in_4bit": $LOAD4 == 1, "steps": $STEPS, "count": $COUNT,
           "fork_ms": [int(x) for x in "${RESULT[fork_ms]:-}".split(",") if x],
           "fork_ms_median": ${RESULT[fork_ms_median]:-None}, "clones_done": ${RESULT[clones_done]:-0},
           "gpu_mem_start_mib": ${mem0:-None}, "gpu_mem_end_mib": ${mem1:-None}, "fails": $FAILS},
          open(sys.argv[1], "w"), indent=1)
EOF
# One record of this run for bench/records (docs/bench.md, "Records").
python3 scripts/device-record.py machine-fork --out "$OUT" \
  --command "scripts/device-machines.sh $PRESET $STEPS $COUNT (LOAD4=$LOAD4)" \
  --summary "{\"fork_ms_median\": ${RESULT[fork_ms_median]:-null}, \"clones\": ${RESULT[clones_done]:-0}, \"preset\": \"$PRESET\"}" \
  "$OUT/machines-summary-$TAG.json" | tee -a "$SUM"
log "done: $FAILS failed check(s); summary in $SUM"
exit $((FAILS > 0))
