#!/usr/bin/env bash
# Issue 33 must-show 2: CUDA graphs and host functions on the GPU, natively
# and through the shims, in one record of kind `graphs`.
#   1. progs   tests/shim/bin/prog_hostfn and prog_graphs natively and through
#              the shims on a bare host (daemon --backend cuda): stdout identical
#   2. fork    prog_graph_fork through the shims: a graph captured in the golden
#              replayed in two clones (smolvm cuda fork --count 2), each checked
#   3. machine prog_hostfn and prog_graphs in a --cuda machine: stdout identical
#              to native
#   4. torch   scripts/torch-suite/graphs.py natively and through the shims:
#              torch.cuda.graphs forward and training graphs, reduce-overhead
#              torch.compile, on a small fp32 model and a large bf16 one
#              (parts *_large); RESULT lines bit-identical; per part the step
#              time synchronized per step (TIME) and back to back (B2B), each
#              as shim / native, and the wire ops one step costs through the
#              shims (OPS); then --fork --sizes small through the shims: the
#              golden's forward graphs replayed in two clones, which capture
#              their training graphs; every clone's RESULT lines equal native's
# Writes to $OUT: summary.txt, runs.log, daemon.log, records/graphs_*.json.
# Estimate: progs 6 x ~2 s, fork ~10 s, machine ~20 s, torch 3 runs of
# ~20-40 s (Inductor compiles in each; 58 s in all on the H100 of 2026-12-07
# with the small model only): about 2-3 minutes, capped by BUDGET_S (330 s).
# Exits 1 when any part failed or differs.
# Env: PY (default /opt/torch/.venv/bin/python3), BUILD, BACKEND (default
# cuda; fake rehearses the script here: the programs pass, torch is skipped
# without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
OUT=${OUT:-$PWD/device-graphs-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
BUDGET_S=${BUDGET_S:-330}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
B=$BUILD
BIN=$B/tests/shim/bin
RUNS=$OUT/runs.log
: >"$OUT/summary.txt" && : >"$RUNS"
T0=$SECONDS
make_workdir device-graphs
SOCK=$W/cuda.sock
nvidia_lib_path "$BIN/prog_graphs"
summary "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
LIBS=""
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
for d in "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cudnn/lib"; do [[ -n $SITE && -d $d ]] && LIBS=${LIBS:+$LIBS:}$d; done
on_exit daemon_stop
daemon_start "$SOCK" "$OUT/daemon.log" --backend "${BACKEND:-cuda}" --pool 2 ${LIBS:+--cuda-libs "$LIBS"} ||
  { summary "daemon did not start: $(tail -n 3 "$OUT/daemon.log" | tr '\n' ' ')"; exit 1; }
shim() { SMOLVM_CUDA_SOCKET=$SOCK LD_LIBRARY_PATH=$B/shim:${LD_LIBRARY_PATH:-} "$@"; }
declare -A R  # the record's summary: name -> JSON value
failed=0
fail() { failed=1; summary "FAIL: $*"; }

# 1. our programs, natively and through the shims
progs_ok=true
for p in prog_hostfn prog_graphs prog_graph_replay; do
  timeout 60 "$BIN/$p" >"$W/$p.native" 2>>"$RUNS"; rn=$?
  shim timeout 60 "$BIN/$p" >"$W/$p.shim" 2>>"$RUNS"; rs=$?
  { echo "== $p native rc $rn"; cat "$W/$p.native"; echo "== $p shim rc $rs"; cat "$W/$p.shim"; } >>"$RUNS"
  if [[ $rn == 0 && $rs == 0 ]] && cmp -s "$W/$p.native" "$W/$p.shim"; then
    summary "$p: native and shim IDENTICAL ($(wc -l <"$W/$p.native") lines)"
  else
    progs_ok=false
    fail "$p: native rc $rn, shim rc $rs, outputs $(cmp -s "$W/$p.native" "$W/$p.shim" && echo same || echo DIFFER)"
  fi
done
R[progs_identical]=$progs_ok

# 2. a graph captured in a golden, replayed in two clones
FORK=$W/fork && mkdir -p "$FORK"
# exec: $! must be the program's own pid (cuda fork --pid finds its session by it), not a subshell's
(SMOLVM_CUDA_SOCKET=$SOCK LD_LIBRARY_PATH=$B/shim:${LD_LIBRARY_PATH:-} exec "$BIN/prog_graph_fork" "$FORK") >>"$RUNS" 2>&1 &
gpid=$!
fork_ok=false
if "$B/smolvm" cuda fork --pid "$gpid" --count 2 --share on --wait 30 --socket "$SOCK" >>"$RUNS" 2>&1; then
  for _ in $(seq 300); do [[ -s $FORK/clone0.txt && -s $FORK/clone1.txt ]] && break; sleep 0.1; done
  "$B/smolvm" cuda release --pid "$gpid" --socket "$SOCK" >>"$RUNS" 2>&1
  wait "$gpid"; rg=$?
  cat "$FORK"/*.txt >>"$RUNS" 2>/dev/null
  [[ $rg == 0 ]] && grep -q "replay=1" "$FORK/clone0.txt" && grep -q "replay=1" "$FORK/clone1.txt" &&
    grep -q "replay=1" "$FORK/golden.txt" && fork_ok=true
else
  kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null
fi
R[fork_clones_replay]=$fork_ok
$fork_ok && summary "fork: the golden's graph replayed in 2 clones and the golden" || fail "fork (runs.log)"

# 3. in a --cuda machine (the machine's own daemon, started on demand)
export SMOLVM_HOME=$W/home
[[ ${BACKEND:-cuda} == fake ]] && export SMOLVM_CUDA_BACKEND=fake  # a rehearsal's machines use the fake too
machine_ok=true
for p in prog_hostfn prog_graphs; do
  name=g-${p#prog_}
  if "$B/smolvm" machine create --name "$name" --cuda -v "$B:/opt/smolvm:ro" -- "/opt/smolvm/tests/shim/bin/$p" \
      >>"$RUNS" 2>&1 && "$B/smolvm" machine start --name "$name" >>"$RUNS" 2>&1; then
    # machine start has no --wait: follow the log until the machine ends
    timeout 90 "$B/smolvm" machine logs --name "$name" --follow 2>/dev/null | grep -v '^smolvm ' >"$W/$p.machine"
  fi
  "$B/smolvm" machine rm --force --name "$name" >>"$RUNS" 2>&1
  if cmp -s "$W/$p.native" "$W/$p.machine"; then
    summary "$p: --cuda machine output IDENTICAL to native"
  else
    machine_ok=false
    fail "$p in a --cuda machine: output differs from native ($(head -c 300 "$W/$p.machine" | tr '\n' ' '))"
  fi
done
unset SMOLVM_HOME
R[machine_identical]=$machine_ok

# 4. torch
if [[ -x $PY ]] && (( SECONDS - T0 < BUDGET_S - 120 )); then
  ENVLINES=$("$B/smolvm" cuda env --socket "$SOCK")
  trun() {  # MODE OUTFILE ARGS...: graphs.py natively or through the shims
    local mode=$1 out=$2
    shift 2
    mkdir -p "$W/inductor-$mode"
    if [[ $mode == native ]]; then
      env LD_LIBRARY_PATH="$LIBS" TORCHINDUCTOR_CACHE_DIR="$W/inductor-$mode" timeout -k 5 150 \
        "$PY" scripts/torch-suite/graphs.py "$@" >"$out" 2>>"$RUNS"
    else
      (eval "$ENVLINES"; env TORCHINDUCTOR_CACHE_DIR="$W/inductor-$mode" PYTHONPATH=$PWD/python timeout -k 5 180 \
        "$PY" scripts/torch-suite/graphs.py "$@") >"$out" 2>>"$RUNS"
    fi
  }
  trun native "$W/torch.native"; rn=$?
  trun shim "$W/torch.shim"; rs=$?
  cat "$W/torch.native" "$W/torch.shim" >>"$RUNS"
  a=$(grep '^RESULT' "$W/torch.native") b=$(grep '^RESULT' "$W/torch.shim")
  if [[ $rn == 0 && $rs == 0 && -n $a && $a == "$b" ]]; then R[torch_identical]=true; summary "torch: RESULT lines identical"
  else R[torch_identical]=false; fail "torch: native rc $rn, shim rc $rs, results $([[ $a == "$b" ]] && echo same || echo DIFFER)"; fi
  # Per part: TIME (synchronized per step; the keys of the first records),
  # B2B (back to back) and, through the shims, OPS (the wire ops per step).
  field() { awk -v k="$1" -v p="$2" -v i="$3" '$1==k && $2==p {print $i}' "$4"; }
  for part in forward compiled train train_compiled forward_large compiled_large train_large train_compiled_large; do
    tn=$(field TIME $part 3 "$W/torch.native") ts=$(field TIME $part 3 "$W/torch.shim")
    bn=$(field B2B $part 3 "$W/torch.native") bs=$(field B2B $part 3 "$W/torch.shim")
    rt=$(field OPS $part 3 "$W/torch.shim") q=$(field OPS $part 4 "$W/torch.shim") ops=$(field OPS $part 5 "$W/torch.shim")
    [[ -n $tn && -n $ts ]] || continue
    R[${part}_ms_native]=$tn R[${part}_ms_shim]=$ts
    R[${part}_ratio]=$(python3 -c "print(round($ts / $tn, 4))")
    line="torch $part: per step native $tn ms, shim $ts ms, ratio ${R[${part}_ratio]}"
    if [[ -n $bn && -n $bs ]]; then
      R[${part}_b2b_ms_native]=$bn R[${part}_b2b_ms_shim]=$bs
      R[${part}_b2b_ratio]=$(python3 -c "print(round($bs / $bn, 4))")
      line+="; back to back native $bn ms, shim $bs ms, ratio ${R[${part}_b2b_ratio]}"
    fi
    if [[ -n $rt && -n $q ]]; then
      R[${part}_round_trips_per_step]=$rt R[${part}_queued_per_step]=$q
      line+="; a step through the shims: $rt round trips, $q queued (op=round trips/queued: $ops)"
    fi
    summary "$line"
  done
  # The golden (forward graphs) and its clones (their own training graphs).
  TF=$W/torch-fork && mkdir -p "$TF"
  (eval "$ENVLINES"; exec env TORCHINDUCTOR_CACHE_DIR="$W/inductor-fork" PYTHONPATH=$PWD/python \
    "$PY" scripts/torch-suite/graphs.py --fork --sizes small --out "$TF") >>"$RUNS" 2>&1 &
  tpid=$!
  for _ in $(seq 900); do [[ -s $TF/golden.txt ]] && break; sleep 0.1; done
  tfork_ok=false
  if [[ -s $TF/golden.txt ]] && "$B/smolvm" cuda fork --pid "$tpid" --count 2 --share off --wait 60 --socket "$SOCK" >>"$RUNS" 2>&1; then
    for _ in $(seq 1200); do [[ -s $TF/clone0.txt && -s $TF/clone1.txt ]] && break; sleep 0.1; done
    tfork_ok=true
    a_small=$(grep -E '^RESULT (forward|compiled|train|train_compiled) ' "$W/torch.native")
    for c in clone0 clone1; do
      got=$(grep '^clone. RESULT' "$TF/$c.txt" | cut -d' ' -f2-)
      [[ -n $got && $got == "$a_small" ]] || tfork_ok=false
    done
  fi
  "$B/smolvm" cuda release --pid "$tpid" --socket "$SOCK" >>"$RUNS" 2>&1
  wait "$tpid" 2>/dev/null
  cat "$TF"/*.txt >>"$RUNS" 2>/dev/null
  R[torch_fork_identical]=$tfork_ok
  $tfork_ok && summary "torch fork: both clones' results (golden's graphs replayed, their own training graphs) equal native's" ||
    fail "torch fork (runs.log)"
else
  summary "torch: skipped (no python at $PY, or the budget)"
  R[torch_identical]=null
fi

json="{"
for k in "${!R[@]}"; do json+="\"$k\": ${R[$k]}, "; done
json="${json%, }}"
python3 scripts/device-record.py graphs --out "$OUT" --command "scripts/device-graphs.sh" --summary "$json" \
  "$RUNS" >>"$OUT/summary.txt" 2>&1 || summary "device-record.py failed"
summary "$((SECONDS - T0)) s; $([[ $failed == 0 ]] && echo PASS || echo FAIL)"
exit "$failed"
