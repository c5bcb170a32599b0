#!/usr/bin/env bash
# GPU fork on the device machine (issue 5 must-show 2 and 4): a golden with
# FROZEN MiB marked frozen and PRIVATE MiB private forks COUNT clones with
# --share on, then 2 with --share off; per-process GPU memory from
# nvidia-smi, fork latency from the CLI, memory back at the start after the
# daemon stops. Runs from the repo root with build/ carried.
# Usage: scripts/device-fork.sh [FROZEN_MIB=8192] [PRIVATE_MIB=512] [COUNT=16]
set -uo pipefail
cd "$(dirname "$0")/.."
FROZEN=${1:-8192} PRIVATE=${2:-512} COUNT=${3:-16}
OUT=${OUT:-$PWD/device-fork-out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/device-fork.XXXXXX)
SOCK=$W/cuda.sock
log() { echo "[device-fork $(date +%T)] $*" | tee -a "$OUT/fork-summary.txt"; }
smi_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
mem0=$(smi_used)
log "memory.used at start: $mem0 MiB; frozen=$FROZEN MiB private=$PRIVATE MiB count=$COUNT"

setsid build/smolvm _cuda-daemon "$SOCK" --backend cuda --pool "$COUNT" 2>"$OUT/fork-daemon.log" &
DAEMON=$!
for _ in $(seq 200); do [[ -S $SOCK.admin ]] && break; sleep 0.05; done
export SMOLVM_CUDA_SOCKET=$SOCK
# Let the pool's contexts come up (ready, not just started) before timing forks.
for _ in $(seq 300); do
  n=$(build/smolvm cuda status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["ready_workers"])' 2>/dev/null)
  [[ ${n:-0} -ge $COUNT ]] && break; sleep 0.1
done
log "pool: ${n:-0} ready workers"

run_arm() {  # share count dir
  local share=$1 count=$2 dir=$W/$1
  mkdir -p "$dir"
  PROG_FORK_HOLD=1 LD_LIBRARY_PATH=$PWD/build/shim:${LD_LIBRARY_PATH:-} \
    build/tests/shim/bin/prog_fork "$dir" "$FROZEN" "$PRIVATE" >"$dir/golden.out" 2>"$dir/golden.err" &
  local golden=$!
  local t0=$(date +%s.%N)
  timeout 120 build/smolvm cuda fork --pid "$golden" --count "$count" --share "$share" --wait 120 \
    >"$OUT/fork-$share.txt" 2>&1
  local rc=$? t1=$(date +%s.%N)
  log "share=$share: cuda fork rc=$rc, $(grep -c '^fork: clone' "$OUT/fork-$share.txt") clone lines, CLI wall $(python3 -c "print(round($t1-$t0,3))") s"
  for _ in $(seq 600); do [[ $(ls "$dir"/clone*.txt 2>/dev/null | wc -l) -ge $count ]] && break; sleep 0.1; done
  sleep 0.5
  cat "$dir"/clone*.txt >>"$OUT/fork-$share.txt" 2>/dev/null
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >"$OUT/apps-$share.csv"
  build/smolvm cuda status >>"$OUT/fork-$share.txt" 2>&1
  log "share=$share: $(ls "$dir"/clone*.txt 2>/dev/null | wc -l)/$count clone reports, ok=$(grep -c 'table=1 frozen=1 private=1 pinned=1 own_private=1 cow=1' "$dir"/clone*.txt 2>/dev/null | awk -F: '{s+=$NF} END {print s+0}'), device used $(smi_used) MiB"
  touch "$dir/exit"
  build/smolvm cuda release --pid "$golden" >>"$OUT/fork-$share.txt" 2>&1
  wait "$golden"; log "share=$share: golden exit $? $(cat "$dir/golden.txt" 2>/dev/null)"
  cat "$dir/golden.err" >>"$OUT/fork-$share.txt"
}
run_arm on "$COUNT"
for _ in $(seq 300); do
  n=$(build/smolvm cuda status --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["ready_workers"])' 2>/dev/null)
  [[ ${n:-0} -ge 2 ]] && break; sleep 0.1
done
run_arm off 2
kill -TERM "$DAEMON"; wait "$DAEMON" 2>/dev/null
sleep 1
log "daemon stopped; memory.used $(smi_used) MiB (start $mem0 MiB)"
rm -rf "$W"
