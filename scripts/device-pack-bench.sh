#!/usr/bin/env bash
# Issue 19 must-show 2: the bench's fork arm with the model baked into a pack
# (`machine create --image FILE.smolmachine`) against the same model from a
# host directory, for several pack variants in one call (the lead picks the
# best from one device run):
#   squashfs        format 1: mksquashfs lz4, 128 KiB blocks, buffered loop (the old default)
#   erofs           format 2: uncompressed erofs, loop with direct I/O (the new default)
#   erofs-buffered  the erofs pack over a buffered loop (SMOLVM_PACK_LOOP=buffered)
# (every pack's loop device: 4 MiB readahead)
# Rounds alternate host and every variant, the order rotated each round.
# Round 1 is cold (caches dropped before each arm: `sync; echo 3 >
# /proc/sys/vm/drop_caches`), the rest warm; golden load medians over the
# warm rounds (5 by default), with the learner's own load time beside it
# (the rest is machine start). The log ends with the page cache's folio
# sizes of the first model shard, host and pack (scripts/page-cache-folios.py:
# the learner's MADV_HUGEPAGE mapping should have left 2 MiB folios). Each variant's pack stays mounted by a holder
# machine, as on a host running machines on it.
#
# Output ($OUT, 2 + one per variant files): pack-bench.log, pack-bench.json
# (every sample and summary), records/pack-load-<variant>_<UTC>.json
# (scripts/device-record.py).
#
# Here, before the device run (the image tools with the libraries Ubuntu may
# lack, in case the device has neither squashfs-tools nor erofs-utils):
#   scripts/device-pack.sh && scripts/device-pack-bench.sh --prepare
# On the device, carrying .carry/build and .carry/packtools:
#   scripts/device-pack-bench.sh            # ~4 min on the H200 (7B, VARIANTS=erofs)
# Env: MODEL (qwen2.5-7b), DEVICE (cuda), VARIANTS ("squashfs erofs"), STEPS (1),
#      ROUNDS (6: 1 cold + 5 warm), COLD (1; 0 = every round warm, round 1 a warm-up
#      left out of the medians), CPUS (4), BUDGET_S (450: no new run starts after it).
# On a machine without a GPU: MODEL=tiny DEVICE=cpu rehearses it.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --prepare ]]; then
  rm -rf .carry/packtools && mkdir -p .carry/packtools
  for tool in mksquashfs mkfs.erofs; do
    cp "$(command -v $tool)" ".carry/packtools/$tool.bin" || { echo "no $tool here (scripts/setup.sh installs it)"; exit 1; }
    for lib in $(ldd ".carry/packtools/$tool.bin" | awk '/=>/ {print $3}'); do
      case $(basename "$lib") in libc.so*|libm.so*|libpthread.so*) ;; *) cp -L "$lib" .carry/packtools/ ;; esac
    done
    printf '#!/bin/sh\nd=$(dirname "$0")\nLD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/%s.bin" "$@"\n' \
      "$tool" >".carry/packtools/$tool"
    chmod +x ".carry/packtools/$tool"
  done
  du -sh .carry/packtools
  exit 0
fi
[[ -e build ]] || ln -s .carry/build build
OUT=${OUT:-$PWD/device-pack-bench-out}
MODEL=${MODEL:-qwen2.5-7b} DEVICE=${DEVICE:-cuda} STEPS=${STEPS:-1} ROUNDS=${ROUNDS:-6} CPUS=${CPUS:-4}
VARIANTS=${VARIANTS:-squashfs erofs} COLD=${COLD:-1} BUDGET_S=${BUDGET_S:-450}
mkdir -p "$OUT"
LOG=$OUT/pack-bench.log
T0=$(date +%s)
log() { echo "[device-pack-bench $(date +%T)] $*" | tee -a "$LOG"; }
since() { python3 -c 'import sys, time; print(round(time.time() - float(sys.argv[1]), 3))' "$1"; }
export SMOLVM_HOME=${SMOLVM_HOME:-/tmp/smolvm-pack-bench-home}
W=$(mktemp -d /tmp/pack-bench.XXXXXX)
SAMPLES=$W/samples.jsonl
: >"$SAMPLES"
cleanup() {
  for v in $VARIANTS; do build/smolvm machine rm --force --name "pb-$v" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap cleanup EXIT
for tool in mksquashfs mkfs.erofs; do
  command -v $tool >/dev/null && continue
  [[ -x .carry/packtools/$tool ]] || { log "no $tool here and none carried (run --prepare here)"; exit 1; }
  [[ $tool == mksquashfs ]] && export SMOLVM_MKSQUASHFS=$PWD/.carry/packtools/$tool
  [[ $tool == mkfs.erofs ]] && export SMOLVM_MKFS_EROFS=$PWD/.carry/packtools/$tool
  log "using the carried $tool: $(ldd .carry/packtools/$tool.bin | grep -c 'not found') libraries missing"
done
log "device-mapper: $(grep -qw device-mapper /proc/devices && echo present || echo absent)"
for f in squashfs erofs; do grep -qw $f /proc/filesystems || modprobe $f 2>/dev/null || log "kernel: $f not in /proc/filesystems"; done
log "kernel $(uname -r); model $MODEL on $DEVICE, $STEPS steps, $ROUNDS rounds (cold first: $COLD), variants: $VARIANTS"

# The model, where the bench looks for its preset (made once).
M=$SMOLVM_HOME/bench/models/$MODEL
if [[ ! -f $M/config.json ]]; then
  mkdir -p "$(dirname "$M")"
  t0=$(date +%s.%N)
  build/smolvm-learner make-model --preset "$MODEL" --seed 0 --out "$M" >>"$LOG" 2>&1 || { log "make-model failed"; exit 1; }
  log "make-model $MODEL: $(since "$t0") s"
fi
model_bytes=$(du -sb "$M" | cut -f1)
log "filesystems: model $(findmnt -no FSTYPE -T "$M" 2>/dev/null || echo '?'), packs $(findmnt -no FSTYPE -T "$W" 2>/dev/null || echo '?'); THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"

# One pack per variant (erofs-buffered is the erofs pack mounted otherwise,
# so it gets a pack of its own: another digest, another mount), each held
# mounted by a machine.
declare -A PACK
ready=()
for v in $VARIANTS; do
  case $v in squashfs) fs=squashfs loop=buffered ;; erofs) fs=erofs loop=tuned ;; erofs-buffered) fs=erofs loop=buffered ;;
    *) log "unknown variant $v"; continue ;; esac
  avail=$(df -B1 --output=avail "$W" | tail -1)
  if ((avail < model_bytes + model_bytes / 10)); then
    echo "{\"variant\":\"$v\",\"error\":\"disk: $avail bytes free, a pack needs ~$model_bytes\"}" >>"$W/variants.jsonl"
    log "$v: skipped, $avail bytes free"; continue
  fi
  mkdir -p "$W/tree-$v/app"
  echo "smolvm pack bench, variant $v" >"$W/tree-$v/app/README"
  P=$W/$v.smolmachine
  t0=$(date +%s.%N)
  if ! build/smolvm pack create --fs $fs --from "$W/tree-$v" --model "$M" -o "$P" >>"$LOG" 2>&1; then
    echo "{\"variant\":\"$v\",\"error\":\"pack create failed: $(tail -1 "$LOG" | tr -d '"\\')\"}" >>"$W/variants.jsonl"
    log "$v: pack create failed"; continue
  fi
  create_s=$(since "$t0")
  t0=$(date +%s.%N)
  build/smolvm machine create --name "pb-$v" --image "$P" -- sleep 100000 >>"$LOG" 2>&1
  verify_s=$(since "$t0")  # machine create hashes the whole image (first use of this file)
  t0=$(date +%s.%N)
  if [[ $loop == buffered ]]; then export SMOLVM_PACK_LOOP=buffered; else unset SMOLVM_PACK_LOOP; fi
  build/smolvm machine start --name "pb-$v" >>"$LOG" 2>&1
  rc=$?
  unset SMOLVM_PACK_LOOP
  start_s=$(since "$t0")  # attach and mount (the unchanged file is not hashed again)
  mnt=$(grep "$SMOLVM_HOME/packs/" /proc/self/mountinfo | while read -r line; do
    src=$(echo "$line" | sed 's/.* - [a-z]* \([^ ]*\).*/\1/'); d=/sys/block/$(basename "$src")
    [[ $(cat "$d/loop/backing_file" 2>/dev/null) == "$P" ]] && echo "$(echo "$line" | sed 's/.* - \([a-z]*\) .*/\1/') dio=$(cat $d/loop/dio) ra_kb=$(cat $d/queue/read_ahead_kb)"
  done)
  python3 - "$v" "$fs" "$loop" "$(stat -c %s "$P")" "$model_bytes" "$create_s" "$verify_s" "$start_s" "$mnt" "$rc" \
    >>"$W/variants.jsonl" <<'PY'
import json, sys
v, fs, loop, pb, mb, c, vs, ss, mnt, rc = sys.argv[1:]
j = {"variant": v, "fs": fs, "loop": loop, "pack_bytes": int(pb), "model_bytes": int(mb), "pack_create_s": float(c),
     "machine_create_hash_s": float(vs), "machine_start_mount_s": float(ss), "mount": mnt}
if rc != "0":
    j["error"] = "the holder machine did not start (log)"
print(json.dumps(j))
PY
  if ((rc != 0)); then log "$v: machine on the pack failed: $(tail -1 "$LOG")"; continue; fi
  log "$v: pack $(stat -c %s "$P") bytes in $create_s s; machine create (hash) $verify_s s; start (mount) $start_s s; mount: $mnt"
  PACK[$v]=$P
  ready+=("$v")
done

run_arm() {  # arm round cold
  local arm=$1 res=$W/results-$1-$2
  if [[ $arm == host ]]; then unset SMOLVM_BENCH_FORK_IMAGE; else export SMOLVM_BENCH_FORK_IMAGE=${PACK[$arm]}; fi
  local dropped=0
  if [[ $3 == 1 ]]; then sync; echo 3 2>>"$LOG" >/proc/sys/vm/drop_caches && dropped=1 || log "cold: drop_caches failed"; fi
  build/smolvm bench run --arm fork --n 1 --model "$MODEL" --load-in-4bit --method dpo --device "$DEVICE" \
    --cpus "$CPUS" --steps "$STEPS" --reps 1 --results "$res" --timeout 240 >>"$LOG" 2>&1 || log "$arm round $2 failed: $(tail -1 "$LOG")"
  python3 - "$arm" "$2" "$3" "$res" "$dropped" >>"$SAMPLES" 2>>"$LOG" <<'PY'
import glob, json, sys
arm, r, cold, res, dropped = sys.argv[1:]
files = glob.glob(res + "/*.json")
j = json.load(open(files[0])) if files else {}
num = lambda k: j.get(k) if isinstance(j.get(k), (int, float)) else None
print(json.dumps({"arm": arm, "round": int(r), "cold": cold == "1", "caches_dropped": dropped == "1",
                  "golden_load_s": num("golden_load_s"),
                  "learner_load_s": num("golden_learner_load_s")}))
PY
  unset SMOLVM_BENCH_FORK_IMAGE
  tail -1 "$SAMPLES" | tee -a "$LOG"
}
arms=(host "${ready[@]}")
((${#ready[@]} == 0)) && ROUNDS=0
for r in $(seq "$ROUNDS"); do
  cold=0; ((r == 1 && COLD == 1)) && cold=1
  n=${#arms[@]}
  for i in $(seq 0 $((n - 1))); do
    if (($(date +%s) - T0 > BUDGET_S)); then log "budget of $BUDGET_S s spent: no more runs"; break 2; fi
    run_arm "${arms[$(((i + r - 1) % n))]}" "$r" "$cold"
  done
done

first_shard() { find "$1" -maxdepth 1 -name '*.safetensors' | sort | head -1; }
for v in host "${ready[@]}"; do
  if [[ $v == host ]]; then d=$M; else d=$(grep -F "$SMOLVM_HOME/packs/" /proc/self/mountinfo | awk '{print $5}' | while read -r mp; do
    [[ -d $mp/$MODEL ]] && echo "$mp/$MODEL"; done | head -1); fi
  f=$(first_shard "${d:-/nonexistent}")
  [[ -n $f ]] && log "page cache of $v: $(python3 scripts/page-cache-folios.py "$f" 2>&1)"
done
python3 - "$OUT" "$W/variants.jsonl" "$SAMPLES" "$MODEL" "$DEVICE" "$(uname -r)" "$COLD" <<'PY' | tee -a "$LOG"
import json, os, statistics, sys
out, variants_f, samples_f, model, device, kernel, cold_first = sys.argv[1:]
read = lambda f: [json.loads(l) for l in open(f) if l.strip()] if os.path.exists(f) else []
variants, samples = read(variants_f), read(samples_f)
first_round = min((s["round"] for s in samples), default=1)
def med(arm, key, cold):
    xs = [s[key] for s in samples if s["arm"] == arm and s[key] is not None and s["cold"] == cold
          and (cold or cold_first == "1" or s["round"] != first_round)]
    return (statistics.median(xs) if xs else None), xs
for v in variants:
    for cold in (False, True):
        tag = "cold" if cold else "warm"
        for key, name in (("golden_load_s", "golden_load"), ("learner_load_s", "learner_load")):
            h, hs = med("host", key, cold)
            p, ps = med(v["variant"], key, cold)
            v[f"{name}_host_{tag}_s"], v[f"{name}_pack_{tag}_s"] = hs, ps
            if h and p:
                v[f"{name}_host_{tag}_median_s"], v[f"{name}_pack_{tag}_median_s"] = h, p
                v[f"{name}_pack_over_host_{tag}"] = round(p / h, 4)
    r = v.get("golden_load_pack_over_host_warm")
    if r is not None:
        v["within_10_percent"] = abs(r - 1) <= 0.10
doc = {"model": model, "device": device, "kernel": kernel, "variants": variants, "samples": samples}
json.dump(doc, open(os.path.join(out, "pack-bench.json"), "w"), indent=1)
for v in variants:
    json.dump({k: x for k, x in v.items() if not isinstance(x, list)}, open(os.path.join(out, f".summary-{v['variant']}.json"), "w"))
print(json.dumps([{k: x for k, x in v.items() if not isinstance(x, list)} for v in variants], indent=1))
PY
for f in "$OUT"/.summary-*.json; do
  [[ -f $f ]] || continue
  v=$(basename "$f" .json); v=${v#.summary-}
  python3 scripts/device-record.py "pack-load-$v" --out "$OUT" --command "scripts/device-pack-bench.sh (MODEL=$MODEL VARIANTS='$VARIANTS' ROUNDS=$ROUNDS COLD=$COLD STEPS=$STEPS)" \
    --summary "$(cat "$f")" "$OUT/pack-bench.json" >>"$LOG" 2>&1
  rm -f "$f"
done
log "done in $(($(date +%s) - T0)) s"
