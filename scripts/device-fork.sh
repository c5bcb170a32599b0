#!/usr/bin/env bash
# GPU fork on the device machine. Runs from the repo root with build/ (or
# .carry/build from scripts/device-pack.sh). Results in $OUT.
#
# Phases (--phase P, repeatable; default: clones):
#   clones   issue 5 must-show 2 and 4: a golden (tests/shim/prog_fork.cu)
#            with FROZEN MiB marked frozen and PRIVATE MiB private forks COUNT
#            clones with --share on once the pool holds its chunks (warm),
#            then 2 with --share off, then 4 with --share auto (the frozen
#            range uploaded by copies; auto ignores marks); per-process GPU memory (nvidia-smi)
#            per clone against private + context + 100 MiB; fork latency per
#            clone (request -> clone's first call served: the fork line's ms),
#            median and the COUNT-clone total; clone 1 writes a shared chunk
#            with a kernel and must fail alone; memory back at the start after
#            the daemon stops.
#   learner  must-show 3: the learner's --fork mode (7B, 4-bit, DPO, 2x256,
#            STEPS steps): a golden forks 4 clones with --share on, another 4
#            with --share off; final losses per lid against native runs of
#            lids 0-3.
# Usage: scripts/device-fork.sh [--phase clones|learner]... [FROZEN_MIB=8192 PRIVATE_MIB=512 COUNT=16]
# Env: MODELS (default /tmp/smolvm_learner_models), STEPS (20); ARMS (clones:
# which of on,off,auto run, default all three); BACKEND=fake
# rehearses the clones phase on a machine without a GPU (no NVML numbers).
# Exits 1 when an arm's fork failed or a clone did not report every check ok
# (the record says so per arm: SHARE_fork_rc, SHARE_clones_ok, SHARE_globals_ok).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
phases=()
while [[ ${1:-} == --phase ]]; do phases+=("$2"); shift 2; done
((${#phases[@]})) || phases=(clones)
FROZEN=${1:-8192} PRIVATE=${2:-512} COUNT=${3:-16}
OUT=${OUT:-$PWD/device-fork-out}
mkdir -p "$OUT"
make_workdir device-fork
SOCK=$W/cuda.sock
SUM=$OUT/fork-summary.txt
LOG_TAG=device-fork LOG_FILE=$SUM
BACKEND=${BACKEND:-cuda}
FAILS=0
smi() { if command -v nvidia-smi >/dev/null; then nvidia-smi "$@"; else echo "nvidia-smi missing" >&2; fi; }
status_json() { build/smolvm cuda status --json 2>/dev/null; }
jq_py() { python3 -c "import json,sys; j=json.load(sys.stdin); print($1)" 2>/dev/null; }
# wait_for PY_EXPR SECONDS: polls the daemon's status until the expression holds.
wait_for() {
  local expr=$1 tries=$(($2 * 10))
  for _ in $(seq "$tries"); do
    [[ $(status_json | jq_py "$expr") == True ]] && return 0
    sleep 0.1
  done
  return 1
}
start_daemon() {  # pool
  daemon_start "$SOCK" "$OUT/fork-daemon.log" --backend "$BACKEND" --pool "$1" || log "daemon: no admin socket"
  export SMOLVM_CUDA_SOCKET=$SOCK
  wait_for "j['ready_workers'] >= $1" 60 || log "pool: only $(status_json | jq_py "j['ready_workers']") ready workers"
}
stop_daemon() {
  [[ -n $DAEMON_PID ]] || return 0
  daemon_stop
  sleep 1
}
# A timeout or ^C still stops the daemon (its workers hold the GPU memory).
on_exit stop_daemon
mem0=$(smi_used)
log "memory.used at start: $mem0 MiB; phases: ${phases[*]}"

# --- clones -------------------------------------------------------------------
run_arm() {  # share count upload
  local share=$1 count=$2 upload=$3 dir=$W/$1
  mkdir -p "$dir"
  PROG_FORK_HOLD=1 PROG_FORK_UPLOAD=$upload LD_LIBRARY_PATH=$PWD/build/shim:${LD_LIBRARY_PATH:-} \
    build/tests/shim/bin/prog_fork "$dir" "$FROZEN" "$PRIVATE" >"$dir/golden.out" 2>"$dir/golden.err" &
  local golden=$! t0=$(date +%s.%N)
  # Warm: the golden at its forkpoint and every pooled worker holding its chunks.
  if wait_for "any(s['pid']==$golden and s['state']=='forkpoint' for s in j['sessions'])" 180; then
    local tf=$(date +%s.%N)
    wait_for "any(s['pid']==$golden and s['preloaded_workers']>=$count for s in j['sessions'])" 120
    log "share=$share: golden $golden at its forkpoint after $(python3 -c "print(round($tf-$t0,2))") s; pool preloaded in $(python3 -c "import time; print(round(time.time()-$tf,2))") s ($(status_json | jq_py "[s['preloaded_workers'] for s in j['sessions'] if s['pid']==$golden]") workers)"
  else
    log "share=$share: golden $golden never reached its forkpoint"; cat "$dir/golden.err" >>"$SUM"
  fi
  # A pooled worker's context, measured (it holds imports only, which NVML
  # does not count in the importer): the budget for each clone's context.
  status_json >"$OUT/status-$share-before.json"
  smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$OUT/apps-$share-before.csv"
  local t1=$(date +%s.%N)
  timeout 120 build/smolvm cuda fork --pid "$golden" --count "$count" --share "$share" --wait 60 --json \
    >"$OUT/fork-$share.jsonl" 2>&1
  local rc=$? t2=$(date +%s.%N)
  log "share=$share: cuda fork rc=$rc, CLI wall $(python3 -c "print(round($t2-$t1,3))") s"
  python3 - "$OUT/fork-$share.jsonl" <<'EOF' | tee -a "$SUM"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
if rows:
    ms = sorted(r["ms"] for r in rows)
    print(f"  {len(rows)} clones: shared={rows[0]['shared']} private={rows[0]['private']} "
          f"shared_mib={rows[0]['shared_mib']:.0f} private_mib={rows[0]['private_mib']:.0f}; "
          f"ms (request -> first call served) median {statistics.median(ms):.1f}, min {ms[0]:.1f}, "
          f"all {len(rows)} by {ms[-1]:.1f}; build_ms median {statistics.median(r['build_ms'] for r in rows):.1f}; "
          f"preloaded {sorted(set(r['preloaded'] for r in rows))}; waited_ms {rows[0]['waited_ms']:.1f}")
EOF
  for _ in $(seq 600); do [[ $(ls "$dir"/clone*.txt 2>/dev/null | wc -l) -ge $count ]] && break; sleep 0.1; done
  sleep 0.5
  status_json >"$OUT/status-$share.json"
  smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >"$OUT/apps-$share.csv"
  python3 - "$OUT/status-$share.json" "$OUT/apps-$share.csv" "$golden" "$OUT/status-$share-before.json" \
    "$OUT/apps-$share-before.csv" "$OUT/memory-$share.json" "$share" <<'EOF' | tee -a "$SUM"
import json, math, statistics, sys
def apps_of(path):
    return {int(p): int(m) for p, m in (l.split(",") for l in open(path) if l.strip())}
st, apps, golden = json.load(open(sys.argv[1])), apps_of(sys.argv[2]), int(sys.argv[3])
before, apps0 = json.load(open(sys.argv[4])), apps_of(sys.argv[5])
pooled = [apps0[w["pid"]] for w in before["pool"] if w["pid"] in apps0]
ctx = statistics.median(pooled) if pooled else float("nan")
print(f"  context: a pooled worker holds {ctx} MiB (median of {len(pooled)}, preloaded imports included)")
clones = [s for s in st["sessions"] if s["role"] == "clone"]
for s in [x for x in st["sessions"] if x["pid"] == golden] + clones[:3]:
    print(f"  {s['role']} session {s['session']}: NVML {apps.get(s['worker_pid'], '?')} MiB; private {s['private_mib']:.0f}, "
          f"shared {s['shared_mib']:.0f}, status context_mib {s['context_mib']:.0f} ({st['context_source']})")
used = [apps[s["worker_pid"]] for s in clones if s["worker_pid"] in apps]
ok = [s for s in clones if s["worker_pid"] in apps and apps[s["worker_pid"]] <= s["private_mib"] + ctx + 100]
if used:
    print(f"  per clone NVML MiB: median {statistics.median(used)}, max {max(used)}; "
          f"within private + context ({ctx}) + 100 MiB: {len(ok)}/{len(clones)}")
# The same figures for the run's record (device-record.py warm-fork).
json.dump({"share": sys.argv[7], "context_mib": None if math.isnan(ctx) else ctx, "clone_nvml_mib": used,
           "within_private_context_100": len(ok), "clones": len(clones)}, open(sys.argv[6], "w"))
EOF
  local nok nglob
  nok=$(cat "$dir"/clone*.txt 2>/dev/null | grep -c 'table=1 frozen=1 private=1 pinned=1 own_private=1 cow=1')
  nglob=$(cat "$dir"/clone*.txt 2>/dev/null | grep -c 'global=1')
  log "share=$share: $(ls "$dir"/clone*.txt 2>/dev/null | wc -l)/$count clone reports, ok=$nok, module global ok=$nglob, fault: $(grep -ho 'fault=[A-Za-z]*' "$dir"/clone1.txt 2>/dev/null), device used $(smi_used) MiB"
  echo "{\"share\": \"$share\", \"count\": $count, \"fork_rc\": $rc, \"clones_ok\": $nok, \"globals_ok\": $nglob}" >"$OUT/checks-$share.json"
  if ((rc != 0 || nok != count || nglob != count)); then
    FAILS=$((FAILS + 1))
    log "share=$share: FAIL (fork rc $rc; $nok of $count clones ok, $nglob with their module global)"
  fi
  cat "$dir"/clone*.txt >>"$OUT/fork-$share.jsonl" 2>/dev/null
  touch "$dir/exit"
  build/smolvm cuda release --pid "$golden" >>"$OUT/fork-$share.jsonl" 2>&1
  wait "$golden"; log "share=$share: golden exit $? $(cat "$dir/golden.txt" 2>/dev/null)"
  cat "$dir/golden.err" >>"$OUT/fork-$share.jsonl"
  # The clones are gone, the golden too: no pooled worker may hold its chunks.
  wait_for "all(w['preloaded_session']==0 for w in j['pool'])" 20 || log "share=$share: a pooled worker still holds chunks"
}

phase_clones() {
  start_daemon "$COUNT"
  log "clones: pool of $COUNT ready; memory.used $(smi_used) MiB"
  local two=$((COUNT < 2 ? COUNT : 2)) four=$((COUNT < 4 ? COUNT : 4))
  local arms=${ARMS:-on,off,auto}  # ARMS=on: only the warm share-on fork
  [[ ,$arms, == *,on,* ]] && run_arm on "$COUNT" 0
  [[ ,$arms, == *,off,* ]] && { wait_for "j['ready_workers'] >= $two" 60; run_arm off "$two" 0; }
  [[ ,$arms, == *,auto,* ]] && { wait_for "j['ready_workers'] >= $four" 60; run_arm auto "$four" 1; }
  grep -E "fork ahead|preload:|prepare|clone build|fork: clone|illegal" "$OUT/fork-daemon.log" | tail -80 >"$OUT/fork-timing.txt"
  stop_daemon
  log "clones: daemon stopped; memory.used $(smi_used) MiB (start $mem0 MiB)"
  # One record of this run for bench/records (docs/bench.md, "Records").
  python3 scripts/device-record.py warm-fork --out "$OUT" \
    --command "scripts/device-fork.sh --phase clones $FROZEN $PRIVATE $COUNT" \
    --summary "{\"frozen_mib\": $FROZEN, \"private_mib\": $PRIVATE}" \
    "$OUT"/fork-on.jsonl "$OUT"/fork-off.jsonl "$OUT"/fork-auto.jsonl "$OUT"/memory-*.json "$OUT"/checks-*.json | tee -a "$SUM"
  # Few files come back from the device: the details in one archive.
  (cd "$OUT" && tar czf clones.tgz fork-on.jsonl fork-off.jsonl fork-auto.jsonl status-*.json apps-*.csv memory-*.json checks-*.json 2>/dev/null &&
    rm -f fork-on.jsonl fork-off.jsonl fork-auto.jsonl status-*.json apps-*.csv memory-*.json checks-*.json)
}

# --- learner ------------------------------------------------------------------
phase_learner() {
  local MODELS=${MODELS:-/tmp/smolvm_learner_models} STEPS=${STEPS:-20} L=$OUT/learner
  mkdir -p "$L" "$MODELS"
  # The learner links libcudart/libcublas dynamically: find NVIDIA's for the
  # native runs (the forked runs get the shims first).
  nvidia_lib_path build/smolvm-learner
  local args=(--model "$MODELS/qwen2.5-7b" --load-in-4bit --method dpo --batch 2 --maxseq 256 --steps "$STEPS" --device cuda)
  if [[ ! -f $MODELS/qwen2.5-7b/config.json ]]; then
    build/smolvm-learner make-model --preset qwen2.5-7b --seed 0 --out "$MODELS/qwen2.5-7b" >"$L/make-model.txt" 2>&1 ||
      { log "learner: make-model failed"; return; }
  fi
  for lid in 0 1 2 3; do
    mkdir -p "$L/native"
    build/smolvm-learner train "${args[@]}" --lid "$lid" --coord "$L/native" --arm native \
      >"$L/native-$lid.out" 2>"$L/native-$lid.err" || log "learner: native lid $lid failed: $(tail -2 "$L/native-$lid.err")"
  done
  start_daemon 5
  for share in on off; do
    mkdir -p "$L/$share"
    LD_LIBRARY_PATH=$PWD/build/shim:${LD_LIBRARY_PATH:-} build/smolvm-learner train "${args[@]}" --fork \
      --coord "$L/$share" --arm "fork-$share" >"$L/golden-$share.out" 2>"$L/golden-$share.err" &
    local golden=$!
    wait_for "any(s['pid']==$golden and s['state']=='forkpoint' for s in j['sessions'])" 180 ||
      log "learner: golden ($share) did not reach its forkpoint: $(tail -3 "$L/golden-$share.err")"
    wait_for "any(s['pid']==$golden and s['preloaded_workers']>=4 for s in j['sessions'])" 60
    timeout 120 build/smolvm cuda fork --pid "$golden" --count 4 --share "$share" --wait 30 >"$L/fork-$share.txt" 2>&1
    log "learner: fork share=$share rc=$? $(head -4 "$L/fork-$share.txt" | cut -c1-160 | tr '\n' '|')"
    for _ in $(seq 1800); do
      [[ $(grep -l '"done"' "$L/$share"/learner_*.jsonl 2>/dev/null | wc -l) -ge 4 ]] && break; sleep 0.1
    done
    build/smolvm cuda status >>"$L/fork-$share.txt" 2>&1
    build/smolvm cuda release --pid "$golden" >>"$L/fork-$share.txt" 2>&1
    wait "$golden"
  done
  stop_daemon
  python3 - "$L" <<'EOF' | tee -a "$SUM"
import json, os, sys
L = sys.argv[1]
def done(arm, lid):
    p = os.path.join(L, arm, f"learner_{lid}.jsonl")
    if not os.path.exists(p): return None
    for line in open(p):
        e = json.loads(line)
        if e.get("event") == "done": return e
    return None
print("  lid  native lossN            share on lossN          share off lossN         on==off  on==native  first step differing (on vs native)")
for lid in range(4):
    n, on, off = done("native", lid), done("on", lid), done("off", lid)
    f = lambda e: "missing" if e is None else repr(e["lossN"])
    same = lambda a, b: a is not None and b is not None and a["losses"] == b["losses"]
    diff = "-"
    if on and n:
        d = [i for i, (a, b) in enumerate(zip(on["losses"], n["losses"])) if a != b]
        diff = str(d[0]) if d else "none"
    print(f"  {lid:3d}  {f(n):22s} {f(on):22s} {f(off):22s} {str(same(on, off)):8s} {str(same(on, n)):11s} {diff}")
EOF
  tar czf "$OUT/learner.tgz" -C "$OUT" learner 2>/dev/null && rm -rf "$L"
}

for p in "${phases[@]}"; do
  case $p in
    clones) phase_clones ;;
    learner) phase_learner ;;
    *) log "unknown phase $p" ;;
  esac
done
stop_daemon
log "end: memory.used $(smi_used) MiB (start $mem0 MiB)"
((FAILS == 0))
