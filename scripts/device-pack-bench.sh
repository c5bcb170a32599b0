#!/usr/bin/env bash
# Issue 19 must-show 2: the bench's fork arm with the model baked into a pack
# (`machine create --image FILE.smolmachine`) against the same model from a
# host directory: golden load (both warm, alternating, median of 3 after one
# warm-up round each), the pack's size and `pack create` time, as JSON in
# $OUT/pack-bench.json (log in $OUT/pack-bench.log).
#
# Here, before the device run (mksquashfs and the one library Ubuntu may lack,
# carried in case the device has no squashfs-tools):
#   scripts/device-pack.sh && scripts/device-pack-bench.sh --prepare
# On the device, carrying .carry:
#   scripts/device-pack-bench.sh            # ~3-5 min on the H200 (7B)
# Env: MODEL (qwen2.5-7b), DEVICE (cuda), STEPS (5), ROUNDS (4: 1 warm-up + 3), CPUS (4).
# On a machine without a GPU: MODEL=tiny DEVICE=cpu rehearses it.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
if [[ ${1:-} == --prepare ]]; then
  mkdir -p .carry/squashfs
  cp "$(command -v mksquashfs)" .carry/squashfs/mksquashfs.bin
  for lib in $(ldd .carry/squashfs/mksquashfs.bin | awk '/=>/ {print $3}'); do
    case $(basename "$lib") in libc.so*|libm.so*|libpthread.so*) ;; *) cp -L "$lib" .carry/squashfs/ ;; esac
  done
  printf '#!/bin/sh\nd=$(dirname "$0")\nLD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/mksquashfs.bin" "$@"\n' \
    >.carry/squashfs/mksquashfs
  chmod +x .carry/squashfs/mksquashfs
  du -sh .carry/squashfs
  exit 0
fi
find_build
OUT=${OUT:-$PWD/device-pack-bench-out}
MODEL=${MODEL:-qwen2.5-7b} DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-5} ROUNDS=${ROUNDS:-4} CPUS=${CPUS:-4}
mkdir -p "$OUT"
LOG=$OUT/pack-bench.log
LOG_TAG=device-pack-bench LOG_FILE=$LOG
since() { python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 3))' "$1"; }
export SMOLVM_HOME=${SMOLVM_HOME:-/tmp/smolvm-pack-bench-home}
make_workdir pack-bench
on_exit "build/smolvm machine rm --force --name pb-holder >/dev/null 2>&1"
if ! command -v mksquashfs >/dev/null; then
  [[ -x .carry/squashfs/mksquashfs ]] || { log "no mksquashfs here and none carried (run --prepare here)"; exit 1; }
  export SMOLVM_MKSQUASHFS=$PWD/.carry/squashfs/mksquashfs
  log "using the carried mksquashfs: $(ldd .carry/squashfs/mksquashfs.bin | grep -c 'not found') libraries missing"
fi
grep -qw squashfs /proc/filesystems || modprobe squashfs 2>/dev/null || log "kernel: squashfs not in /proc/filesystems"
log "kernel $(uname -r); model $MODEL on $DEVICE, $STEPS steps, $ROUNDS rounds"

# The model, where the bench looks for its preset (made once).
M=$SMOLVM_HOME/bench/models/$MODEL
if [[ ! -f $M/config.json ]]; then
  mkdir -p "$(dirname "$M")"
  t0=$(date +%s.%N)
  build/smolvm-learner make-model --preset "$MODEL" --seed 0 --out "$M" >>"$LOG" 2>&1 || { log "make-model failed"; exit 1; }
  log "make-model $MODEL: $(since "$t0") s"
fi
model_bytes=$(du -sb "$M" | cut -f1)

# The pack: a small tree plus the model at /<name>.
mkdir -p "$W/tree/app"
echo "smolvm pack bench" >"$W/tree/app/README"
P=$W/model.smolmachine
t0=$(date +%s.%N)
build/smolvm pack create --from "$W/tree" --model "$M" -o "$P" >>"$LOG" 2>&1 || { log "pack create failed"; exit 1; }
create_s=$(since "$t0")
pack_bytes=$(stat -c %s "$P")
t0=$(date +%s.%N)
build/smolvm pack verify "$P" >>"$LOG" 2>&1 || { log "pack verify failed"; exit 1; }
verify_s=$(since "$t0")
log "pack: $pack_bytes bytes (model $model_bytes) in $create_s s; verify $verify_s s"
# A machine holding the pack keeps it mounted (verified once), as a host
# running machines on it would; the bench's goldens then share that mount.
t0=$(date +%s.%N)
ERR=
build/smolvm machine create --name pb-holder --image "$P" -- sleep 100000 >>"$LOG" 2>&1 &&
  build/smolvm machine start --name pb-holder >>"$LOG" 2>&1 || ERR="machine on the pack failed: $(tail -1 "$LOG")"
mount_s=$(since "$t0")
[[ -z $ERR ]] && log "first mount (verify + loop + mount + machine start): $mount_s s" || log "$ERR"

run_arm() {  # host|pack round
  local res=$W/results-$1-$2
  if [[ $1 == pack ]]; then export SMOLVM_BENCH_FORK_IMAGE=$P; else unset SMOLVM_BENCH_FORK_IMAGE; fi
  build/smolvm bench run --arm fork --n 1 --model "$MODEL" --load-in-4bit --method dpo --device "$DEVICE" \
    --cpus "$CPUS" --steps "$STEPS" --reps 1 --results "$res" --timeout 240 >>"$LOG" 2>&1 || { log "$1 round $2 failed: $(tail -1 "$LOG")" >&2; echo nan; return; }
  python3 -c "import json,glob; print(json.load(open(glob.glob('$res/*.json')[0]))['golden_load_s'])" 2>>"$LOG" || echo nan
}
host=() pack=()
[[ -n $ERR ]] && ROUNDS=0
for r in $(seq "$ROUNDS"); do
  h=$(run_arm host "$r"); p=$(run_arm pack "$r")
  log "round $r: golden load host $h s, pack $p s"
  ((r > 1)) && host+=("$h") && pack+=("$p")
done
unset SMOLVM_BENCH_FORK_IMAGE
python3 - "$OUT/pack-bench.json" "$MODEL" "$DEVICE" "$pack_bytes" "$model_bytes" "$create_s" "$verify_s" "$mount_s" \
  "${host[*]:-}" "${pack[*]:-}" "$ERR" "$(uname -r)" <<'PY' | tee -a "$LOG"
import json, statistics, sys
out, model, device, pack_b, model_b, create_s, verify_s, mount_s, host, pack, err, kernel = sys.argv[1:]
num = lambda s: [float(x) for x in s.split() if x.replace('.', '', 1).isdigit()]
h, p = num(host), num(pack)
j = {"model": model, "device": device, "pack_bytes": int(pack_b), "model_bytes": int(model_b),
     "pack_create_s": float(create_s), "pack_verify_s": float(verify_s), "first_mount_s": float(mount_s),
     "golden_load_host_s": h, "golden_load_pack_s": p, "kernel": kernel}
if err:
    j["error"] = err
if h and p:
    j["golden_load_host_median_s"] = statistics.median(h)
    j["golden_load_pack_median_s"] = statistics.median(p)
    j["pack_over_host"] = j["golden_load_pack_median_s"] / j["golden_load_host_median_s"]
    j["within_10_percent"] = abs(j["pack_over_host"] - 1) <= 0.10
json.dump(j, open(out, "w"), indent=2)
print(json.dumps(j, indent=2))
PY
