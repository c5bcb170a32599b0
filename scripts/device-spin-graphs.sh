#!/usr/bin/env bash
# Issue 33 probe: where a synchronized torch step's fixed cost through the
# shims goes, by spin budget. scripts/torch-suite/graphs.py runs natively once
# and through the shims once per guest/worker spin pair (SMOLVM_SPIN_US: the
# guest's wait for a reply; SMOLVM_WORKER_SPIN_US: the worker's wait for the
# next request), each pair on its own daemon; prints per part the TIME
# (synchronized step) and B2B (back to back) ratios shim / native.
# Not a record: it chooses defaults (as scripts/device-spin.sh did for the
# round trip); the graphs record stays scripts/device-graphs.sh's.
# Usage (repository root, build/ or .carry/build carried):
#   OUT=DIR [COMBOS="0/20 1000/20 0/1000 1000/1000"] [SIZES=small,large] scripts/device-spin-graphs.sh
# Writes OUT/spin-graphs.txt (the table), OUT/<combo>.txt (graphs.py's lines),
# OUT/runs.log. Exit 1 when a run fails or its RESULT lines differ from native.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
OUT=${OUT:-$PWD/device-spin-graphs-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
COMBOS=${COMBOS:-0/20 1000/20 0/1000 1000/1000}
SIZES=${SIZES:-small,large}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
RUNS=$OUT/runs.log
: >"$RUNS"
[[ -x $PY ]] || { echo "device-spin-graphs: no python at $PY" >&2; exit 2; }
make_workdir device-spin-graphs
nvidia_lib_path "$BUILD/smolvm"
LIBS=""
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
for d in "$SITE/nvidia/cu13/lib" "$SITE/nvidia/cudnn/lib"; do [[ -n $SITE && -d $d ]] && LIBS=${LIBS:+$LIBS:}$d; done
on_exit daemon_stop
failed=0
mkdir -p "$W/inductor"
env LD_LIBRARY_PATH="$LIBS" TORCHINDUCTOR_CACHE_DIR="$W/inductor/native" timeout -k 5 150 \
  "$PY" scripts/torch-suite/graphs.py --sizes "$SIZES" >"$OUT/native.txt" 2>>"$RUNS" || failed=1
for combo in $COMBOS; do
  g=${combo%/*} w=${combo#*/}
  sock=$W/spin-$g-$w.sock
  SMOLVM_WORKER_SPIN_US=$w daemon_start "$sock" "$OUT/daemon.log" --backend "${BACKEND:-cuda}" --pool 1 \
    ${LIBS:+--cuda-libs "$LIBS"} || { echo "daemon for $combo did not start" >>"$RUNS"; failed=1; continue; }
  envlines=$("$BUILD/smolvm" cuda env --socket "$sock")
  (eval "$envlines"; env SMOLVM_SPIN_US="$g" TORCHINDUCTOR_CACHE_DIR="$W/inductor/$g-$w" PYTHONPATH=$PWD/python \
    timeout -k 5 180 "$PY" scripts/torch-suite/graphs.py --sizes "$SIZES") >"$OUT/$g-$w.txt" 2>>"$RUNS" || failed=1
  daemon_stop
  if [[ "$(grep '^RESULT' "$OUT/native.txt")" != "$(grep '^RESULT' "$OUT/$g-$w.txt")" ]]; then
    echo "RESULT lines of $combo differ from native" >>"$RUNS"
    failed=1
  fi
done
python3 - "$OUT" $COMBOS <<'EOF' | tee "$OUT/spin-graphs.txt"
import sys
out, combos = sys.argv[1], sys.argv[2:]
def read(name):
    got = {}
    try:
        for line in open(f"{out}/{name}.txt"):
            f = line.split()
            if len(f) >= 3 and f[0] in ("TIME", "B2B"):
                got[(f[0], f[1])] = float(f[2])
    except OSError:
        pass
    return got
native = read("native")
parts = sorted({p for _, p in native})
print("guest/worker spin us | " + " | ".join(f"{p} TIME, B2B" for p in parts))
for c in combos:
    shim = read(c.replace("/", "-"))
    cells = []
    for p in parts:
        r = [shim.get((k, p), 0) / native[(k, p)] if native.get((k, p)) else 0 for k in ("TIME", "B2B")]
        cells.append(f"{r[0]:.3f}, {r[1]:.3f}")
    print(f"{c} | " + " | ".join(cells))
EOF
exit $failed
