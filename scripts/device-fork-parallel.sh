#!/usr/bin/env bash
# Issue 18: how many clone builds a fork runs at once, A/B on one build. The
# warm share-on fork of scripts/device-fork.sh (clones phase: a golden with
# FROZEN MiB frozen and PRIVATE MiB private forks COUNT clones once the pool
# holds its chunks) under each daemon policy, the arms alternated ROUNDS times:
#   fixed8  --fork-parallel-policy fixed, --fork-parallel 8 (session 8's rule)
#   serial  --fork-parallel-policy fixed, --fork-parallel 1
#   shape   --fork-parallel-policy shape (each fork picks from its clones'
#           device and host work, at most 8; src/daemon/fork_parallel.h)
# Prints per arm the medians over its rounds of: the fork's clone ms median
# (request -> clone serving), the last clone's ms, the build_ms median, and
# the builds at once the daemon chose.
# Usage: scripts/device-fork-parallel.sh [FROZEN_MIB=8192 PRIVATE_MIB=512 COUNT=16]
# Env: ROUNDS (3), ARMS_LIST ("fixed8 serial shape"), BACKEND (cuda; fake
# rehearses it without a GPU), OUT. Writes $OUT/fork-parallel.txt and
# $OUT/fork-parallel-runs.tgz (each run's summary, daemon timing, record).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
FROZEN=${1:-8192} PRIVATE=${2:-512} COUNT=${3:-16}
ROUNDS=${ROUNDS:-3} ARMS_LIST=${ARMS_LIST:-fixed8 serial shape}
OUT=${OUT:-$PWD/device-fork-parallel-out}
mkdir -p "$OUT"
make_workdir device-fork-parallel
SUM=$OUT/fork-parallel.txt
LOG_TAG=fork-parallel LOG_FILE=$SUM
log "FROZEN=$FROZEN PRIVATE=$PRIVATE COUNT=$COUNT ROUNDS=$ROUNDS arms: $ARMS_LIST backend ${BACKEND:-cuda}"
for r in $(seq "$ROUNDS"); do
  for arm in $ARMS_LIST; do
    case $arm in
      fixed8) env_arm=(SMOLVM_CUDA_FORK_POLICY=fixed SMOLVM_CUDA_FORK_PARALLEL=8) ;;
      serial) env_arm=(SMOLVM_CUDA_FORK_POLICY=fixed SMOLVM_CUDA_FORK_PARALLEL=1) ;;
      shape) env_arm=(SMOLVM_CUDA_FORK_POLICY=shape SMOLVM_CUDA_FORK_PARALLEL=8) ;;
      *) log "unknown arm $arm"; continue ;;
    esac
    d=$W/runs/$arm-$r
    mkdir -p "$d"
    t0=$SECONDS
    env "${env_arm[@]}" ARMS=on OUT="$d" timeout 300 scripts/device-fork.sh --phase clones "$FROZEN" "$PRIVATE" "$COUNT" \
      >"$d/stdout.txt" 2>&1
    log "round $r $arm: rc $? in $((SECONDS - t0)) s: $(grep -m1 -o 'ms (request.*' "$d/fork-summary.txt" 2>/dev/null | cut -c1-150)"
    rm -f "$d/clones.tgz"
  done
done
python3 - "$W/runs" <<'PY' | tee -a "$SUM"
import glob, json, os, re, statistics, sys
runs = sys.argv[1]
arms = {}
for d in sorted(glob.glob(os.path.join(runs, "*"))):
    arm = os.path.basename(d).rsplit("-", 1)[0]
    rec = glob.glob(os.path.join(d, "records", "warm-fork_*.json"))
    if not rec:
        arms.setdefault(arm, []).append(None)
        continue
    s = json.load(open(rec[0]))["summary"]
    log = open(os.path.join(d, "fork-daemon.log"), errors="replace").read()
    k = re.findall(r": (\d+) of \d+ clone builds at once", log)
    s["at_once"] = int(k[0]) if k else None
    arms.setdefault(arm, []).append(s)
med = lambda v: statistics.median(v) if v else float("nan")
print("arm      runs  clone ms median  last clone ms  build_ms median  builds at once (shape's pick)")
for arm, rows in arms.items():
    ok = [r for r in rows if r and r.get("on_clones")]
    print(f"{arm:8s} {len(ok)}/{len(rows)}  {med([r['on_ms_median'] for r in ok]):15.1f}  "
          f"{med([r['on_all_by_ms'] for r in ok]):13.1f}  {med([r['on_build_ms_median'] for r in ok]):15.1f}  "
          f"{sorted(set(r['at_once'] for r in ok if r['at_once']))}")
PY
(cd "$W" && tar czf "$OUT/fork-parallel-runs.tgz" runs) || log "no archive"
