#!/usr/bin/env bash
# Local A/B of the shim's micro-benchmarks on this machine's CPU, fake
# backend (no GPU): two packed build trees (scripts/device-pack.sh), each
# run as its own daemon + shim, alternating A, B, B, A, ... for ROUNDS
# rounds, one fresh daemon per run. Prints, per benchmark field, the median
# of A's runs, of B's runs and B/A.
#
# Usage: scripts/local-ab.sh A_DIR B_DIR
# Environment:
#   ROUNDS=7              runs of each build
#   MODES="roundtrip launch"   micro_bench modes (copy moves 1 GiB: slow here)
#   ITERS=                --iters for micro_bench (its default when empty)
#   BENCH=B_DIR/tests/gpu/micro_bench   the one benchmark binary both builds
#                         run (an older tree's may lack a mode; it is a plain
#                         CUDA program, the shim under it is what differs)
#   CPUS=                 taskset -c list for daemon and benchmark (e.g. 1)
#   A_ENV= B_ENV=         extra VAR=value words for that build's daemon
#                         (e.g. B_ENV=SMOLVM_WORKER_SECCOMP=off)
#   OUT=                  keep the JSON lines (a.jsonl, b.jsonl) there
# Exit status: 0; 1 when a run failed (named on stderr); 2 on bad usage.
#
# The fake's launches cost nothing, so a plain `launch` run measures two CPU
# processes handing batches over on this machine's few cores; a GPU's launch
# (~4.4 us on the H200) is modelled with SMOLVM_FAKE_LAUNCH_NS, which trees
# before 957b912 ignore (build such an A with the fake's launch loop added):
#   ROUNDS=10 scripts/local-ab.sh /tmp/A /tmp/B
#   ROUNDS=8 MODES=launch A_ENV=SMOLVM_FAKE_LAUNCH_NS=4000 B_ENV=SMOLVM_FAKE_LAUNCH_NS=4000 \
#     scripts/local-ab.sh /tmp/A-with-launch-ns /tmp/B
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

(($# == 2)) || { echo "usage: scripts/local-ab.sh A_DIR B_DIR (see the header)" >&2; exit 2; }
A=$(cd "$1" 2>/dev/null && pwd) || { echo "local-ab: no directory $1" >&2; exit 2; }
B=$(cd "$2" 2>/dev/null && pwd) || { echo "local-ab: no directory $2" >&2; exit 2; }
for d in "$A" "$B"; do
  [[ -x $d/smolvm && -f $d/shim/libcudart.so.13 ]] || { echo "local-ab: $d has no smolvm or shim/libcudart.so.13 (a device-pack.sh tree?)" >&2; exit 2; }
done
ROUNDS=${ROUNDS:-7}
MODES=${MODES:-roundtrip launch}
BENCH=${BENCH:-$B/tests/gpu/micro_bench}
[[ -x $BENCH ]] || { echo "local-ab: no benchmark binary $BENCH" >&2; exit 2; }
PIN=()
[[ -n ${CPUS:-} ]] && PIN=(taskset -c "$CPUS")

make_workdir local-ab
RES=${OUT:-$W}
mkdir -p "$RES"
: >"$RES/a.jsonl"
: >"$RES/b.jsonl"
on_exit daemon_stop
FAILED=0

# run_one LABEL DIR ENV...: one daemon of DIR, every mode once, its JSON
# lines appended to RES/LABEL.jsonl.
run_one() {
  local label=$1 dir=$2
  shift 2
  local sock=$W/$label.sock
  BUILD=$dir daemon_start_env "$sock" "$W/$label.daemon.log" "$@" || {
    echo "local-ab: $label daemon did not start (see $W/$label.daemon.log)" >&2
    FAILED=1
    daemon_stop
    return
  }
  local m
  for m in $MODES; do
    env LD_LIBRARY_PATH="$dir/shim" SMOLVM_CUDA_SOCKET="$sock" "${PIN[@]}" \
      "$BENCH" "$m" --label "$label" ${ITERS:+--iters "$ITERS"} >>"$RES/$label.jsonl" 2>>"$W/$label.bench.err" ||
      { echo "local-ab: $label $m failed (see $W/$label.bench.err)" >&2; FAILED=1; }
  done
  daemon_stop
}

# Like lib.sh's daemon_start, with extra environment words for the daemon.
daemon_start_env() {
  local sock=$1 logf=$2
  shift 2
  rm -f "$sock" "$sock.admin"
  setsid env "$@" "${PIN[@]}" "$BUILD/smolvm" _cuda-daemon "$sock" --backend fake >>"$logf" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 200); do
    [[ -S $sock.admin ]] && return 0
    kill -0 "$DAEMON_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

read -r -a AENV <<<"${A_ENV:-}"
read -r -a BENV <<<"${B_ENV:-}"
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then
    run_one a "$A" "${AENV[@]}"; run_one b "$B" "${BENV[@]}"
  else
    run_one b "$B" "${BENV[@]}"; run_one a "$A" "${AENV[@]}"
  fi
done

echo "local A/B, fake backend on $(nproc) CPUs${CPUS:+ (pinned to $CPUS)}, $ROUNDS runs each: A=$A ($(cat "$A/COMMIT" 2>/dev/null || echo '?')) B=$B ($(cat "$B/COMMIT" 2>/dev/null || echo '?'))"
python3 - "$RES/a.jsonl" "$RES/b.jsonl" <<'EOF'
import json, statistics, sys
def load(path):
    runs = {}
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        for k, v in d.items():
            if isinstance(v, (int, float)) and k not in ("iters", "launches", "bytes", "reps"):
                runs.setdefault((d.get("bench", "?"), k), []).append(v)
    return runs
a, b = load(sys.argv[1]), load(sys.argv[2])
print(f"{'bench.field':34} {'A median':>12} {'B median':>12} {'B/A':>7}  runs")
for key in sorted(set(a) | set(b)):
    ma = statistics.median(a[key]) if key in a else float("nan")
    mb = statistics.median(b[key]) if key in b else float("nan")
    ratio = mb / ma if key in a and key in b and ma else float("nan")
    print(f"{key[0] + '.' + key[1]:34} {ma:12.2f} {mb:12.2f} {ratio:7.3f}  {len(a.get(key, []))}/{len(b.get(key, []))}")
EOF
exit "$FAILED"
