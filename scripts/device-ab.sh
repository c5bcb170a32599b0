#!/usr/bin/env bash
# A/B on the GPU machine (issue 15, must-show 2): the previous build
# (.carry/build-prev, A) and the new one (.carry/build, B) in one device call,
# alternating A, B, A, B. Each run:
#   round 1   the gpu-labelled CTest tests, the 7 tests/gpu programs natively
#             and through the shim, the micro-benchmarks natively and through
#             the shim (scripts/device-check.sh --phase gpu-tests,programs,bench)
#             and a warm fork of 16 clones of an 8 GiB golden, share on
#             (ARMS=on scripts/device-fork.sh --phase clones 8192 512 16)
#   round 2+  the micro-benchmarks and the warm fork again (the performance
#             samples; correctness was round 1's)
# B's daemons run their workers as unprivileged per-tenant uids under
# SMOLVM_WORKER_SECCOMP (default enforce; A predates both and ignores it) and
# the words in B_ENV (e.g. B_ENV=SMOLVM_SHIM_FLUSH_OPS=0), recorded as `env`.
# B_ENV=SMOLVM_WORKER_TRACE=1 makes B's workers log when they enter their
# jail and what it took ("jail entered as uid U in X ms", in logs.tgz's
# daemon logs): at a preload, ahead of the fork, except for the one pooled
# worker kept out of any jail.
# Each script runs from a tree of links (scripts, tests, build -> that arm's
# build), so the same script version drives both builds.
#
# Output under $OUT (3 files): ab-records.jsonl, one JSON record per run
# (arm, build id, card, date, what passed, raw micro-bench rows, fork ms
# samples) to commit under bench/records/; ab-summary.txt (A vs B medians);
# logs.tgz. ROUNDS (default 2) and DEADLINE (default 540 s) keep it under 9
# minutes (ROUND1_S, default 340: the guess for round 1, whose tests make it the longest): a round (A then B) that would not finish by the deadline is
# skipped and says so.
# Exit status: 0 when every run that ran passed (and one did), 1 otherwise,
# 2 when a build is missing. BACKEND=fake rehearses it without a GPU (the
# GPU tests and programs then fail; the fork and the records work);
# FORK="FROZEN_MIB PRIVATE_MIB COUNT" (default "8192 512 16") sizes the fork,
# e.g. FORK="64 16 4" for a rehearsal on a small machine.
#
# Two packed builds pass the carry's 64 MiB only when one is compressed: a
# build may come as a directory (.carry/build) or a tarball of one
# (.carry/build-prev.tgz), e.g.
#   scripts/device-pack.sh ../prev/build /tmp/prev && tar czf .carry/build-prev.tgz -C /tmp/prev .
#   scripts/device-pack.sh build .carry/build
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/lib.sh
OUT=${OUT:-$ROOT/device-ab-out}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-2} DEADLINE=${DEADLINE:-540} FORK=${FORK:-8192 512 16}
make_workdir device-ab
LOG_FILE=$W/ab.log LOG_FD=2
A=$ROOT/.carry/build-prev B=$ROOT/.carry/build
for arm in A B; do
  d=${!arm}
  if [[ ! -d $d && -f $d.tgz ]]; then
    mkdir -p "$W/unpacked-$arm" && tar xzf "$d.tgz" -C "$W/unpacked-$arm" && printf -v "$arm" '%s' "$W/unpacked-$arm"
  fi
done
for d in "$A" "$B"; do
  [[ -x $d/smolvm ]] || { echo "device-ab: $d/smolvm missing (scripts/device-pack.sh BUILD DEST)" >&2; exit 2; }
done
REC=$OUT/ab-records.jsonl
: >"$REC"
FAILED=0
CARD=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null | head -1)

# A tree of links whose build/ is that arm's: the scripts find everything there.
for arm in A B; do
  mkdir -p "$W/tree-$arm"
  ln -s "$ROOT/scripts" "$W/tree-$arm/scripts"
  ln -s "$ROOT/tests" "$W/tree-$arm/tests"
  cp -a "$([[ $arm == A ]] && echo "$A" || echo "$B")" "$W/tree-$arm/build"  # device-check relocates its CTest files
done

build_id() {  # BUILD: version, proto hash, a hash of the binary
  printf '%s; proto %s; smolvm sha256 %s' "$("$1/smolvm" --version 2>&1 | head -1)" \
    "$("$1/smolvm" --proto-hash 2>&1 | head -1)" "$(sha256sum "$1/smolvm" | cut -c1-16)"
}

run_one() {  # ARM ROUND
  local arm=$1 round=$2 tree=$W/tree-$1 dir=$W/run-$2-$1 t0=$SECONDS phases=bench env_seccomp=()
  mkdir -p "$dir"
  ((round == 1)) && phases=gpu-tests,programs,bench
  # B_ENV: more VAR=VALUE words for B's runs (e.g. SMOLVM_SHIM_FLUSH_OPS=0),
  # to split a difference between the builds by one setting.
  [[ $arm == B ]] && env_seccomp=(SMOLVM_WORKER_SECCOMP="${SECCOMP:-enforce}" ${B_ENV:-})
  log "run $round $arm: $phases + warm fork ($FORK)"
  env "${env_seccomp[@]}" OUT="$dir/check" timeout 300 "$tree/scripts/device-check.sh" --phase "$phases" \
    --build "$tree/build" --backend "${BACKEND:-cuda}" --deadline 240 >"$dir/check.log" 2>&1
  local check_rc=$?
  env "${env_seccomp[@]}" OUT="$dir/fork" ARMS=on timeout 150 "$tree/scripts/device-fork.sh" --phase clones $FORK \
    >"$dir/fork.log" 2>&1
  local fork_rc=$?
  tar xzf "$dir/fork/clones.tgz" -C "$dir/fork" fork-on.jsonl 2>/dev/null
  python3 - "$arm" "$round" "$(build_id "$tree/build")" "$CARD" "$dir" "$check_rc" "$fork_rc" "$((SECONDS - t0))" \
    "${SECCOMP:-enforce}" "${B_ENV:-}" >>"$REC" <<'PY'
import json, os, sys, datetime
arm, rnd, build, card, d, check_rc, fork_rc, secs, seccomp, b_env = sys.argv[1:]
def lines(p):
    return [l.rstrip("\n") for l in open(p)] if os.path.exists(p) else []
summary = [l for l in lines(f"{d}/check/summary.txt") if l[:1].isalpha() and not l.startswith(("smolvm", "phase", "overall"))]
bench = []
for l in lines(f"{d}/check/bench.jsonl"):
    try: bench.append(json.loads(l))
    except ValueError: pass
fork = [json.loads(l) for l in lines(f"{d}/fork/fork-on.jsonl") if l.startswith("{") and '"ms"' in l]
# What the daemons said of their workers' jail (B: one uid per tenant, the
# seccomp mode), and any worker that could not enter it or was stopped by it.
import tarfile, glob
daemon_lines = lines(f"{d}/fork/fork-daemon.log")
try:
    with tarfile.open(f"{d}/check/logs.tar.gz") as t:
        m = t.extractfile("logs/daemon.log")
        if m: daemon_lines += m.read().decode(errors="replace").splitlines()
except (OSError, KeyError, tarfile.TarError):
    pass
jail = sorted({l.split(": ", 1)[1] for l in daemon_lines if ": workers: " in l})
jail_failures = [l for l in daemon_lines if "cannot enter its jail" in l or "is not allowed" in l][:5]
reports = [l for l in lines(f"{d}/fork/fork-on.jsonl") if "table=" in l]
rec = {
    "arm": arm, "build": "prev" if arm == "A" else "new", "build_id": build, "card": card,
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "round": int(rnd), "seconds": int(secs),
    "workers": "as before (root, no seccomp)" if arm == "A" else f"per-tenant uid, seccomp {seccomp}",
    "env": "" if arm == "A" else b_env,
    "daemon_jail": jail, "jail_failures": jail_failures,
    "check_rc": int(check_rc), "check": summary, "fork_rc": int(fork_rc),
    "fork_ms": [r["ms"] for r in fork], "fork_build_ms": [r.get("build_ms") for r in fork],
    "clones_verified": sum("cow=1" in l for l in reports), "clones": len(fork),
    "bench": bench,
}
print(json.dumps(rec))
PY
  local ok=1
  [[ $check_rc == 0 && $fork_rc == 0 ]] || ok=0
  ((ok)) || FAILED=1
  log "run $round $arm: check rc $check_rc, fork rc $fork_rc, $((SECONDS - t0)) s"
}

trap 'log interrupted; exit 1' INT TERM
round_secs=()  # what each arm's run took in round 1 and later rounds
for round in $(seq "$ROUNDS"); do
  # A round is a pair (A then B): it starts only when both fit before the
  # deadline, judged by the slowest run of its kind so far (or a guess).
  need=$((round == 1 ? ${ROUND1_S:-340} : ${round_secs[1]:-180}))
  if ((SECONDS + need > DEADLINE)); then
    log "round $round: SKIPPED (needs ~${need}s, deadline ${DEADLINE}s, at ${SECONDS}s)"
    continue
  fi
  t0=$SECONDS
  for arm in A B; do run_one "$arm" "$round"; done
  ((round == 1)) && round_secs[1]=$(((SECONDS - t0) * 3 / 5))  # later rounds skip the tests
done

python3 - "$REC" >"$OUT/ab-summary.txt" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(xs): return statistics.median(xs) if xs else float("nan")
print(f"A/B, {len(recs)} runs; card: {recs[0]['card'] if recs else '?'}")
for r in recs:
    print(f"  run {r['round']} {r['arm']} ({r['build']}: {r['workers']}): check rc {r['check_rc']} fork rc {r['fork_rc']}, "
          f"{r['clones_verified']}/{r['clones']} clones verified, fork ms median {med(r['fork_ms']):.1f}, {r['seconds']} s")
    for l in r["check"]: print("     " + l)
    for l in r["daemon_jail"] + r["jail_failures"]: print("     daemon: " + l)
keys = {}
for r in recs:
    for b in r["bench"]:
        if b.get("label") != "shim": continue
        k = "/".join(str(b[f]) for f in ("bench", "dir", "host_mem") if f in b)
        for f, v in b.items():
            if isinstance(v, (int, float)) and f not in ("n", "iters", "bytes", "reps"):
                keys.setdefault((k, f), {"A": [], "B": []})[r["arm"]].append(v)
print("micro-bench through the shim, per field: median A, median B, B/A")
for (k, f), v in sorted(keys.items(), key=lambda x: str(x[0])):
    a, b = med(v["A"]), med(v["B"])
    print(f"  {k}.{f}: {a:.4g} {b:.4g} {b / a if a else float('nan'):.3f}")
fa = [m for r in recs if r["arm"] == "A" for m in r["fork_ms"]]
fb = [m for r in recs if r["arm"] == "B" for m in r["fork_ms"]]
print(f"warm fork x16, ms (request -> clone serving): A median {med(fa):.1f} (n={len(fa)}), B median {med(fb):.1f} (n={len(fb)})")
# Clones are built one after another, so a clone's ms is the sum of the
# builds before it: one stall (clone 1's deliberate fault stops the GPU
# for 100-150 ms when it lands inside the fork) moves every later clone.
# The gap between consecutive clones and the build time are per clone.
def gaps(arm):
    out = []
    for r in recs:
        if r["arm"] == arm:
            ms = sorted(r["fork_ms"])
            out += [b - a for a, b in zip(ms, ms[1:])]
    return out
ga, gb = gaps("A"), gaps("B")
ba = [m for r in recs if r["arm"] == "A" for m in r["fork_build_ms"] if m is not None]
bb = [m for r in recs if r["arm"] == "B" for m in r["fork_build_ms"] if m is not None]
print(f"  per clone, ms: gap to the previous clone A median {med(ga):.2f}, B median {med(gb):.2f}; "
      f"build A median {med(ba):.2f}, B median {med(bb):.2f}")
PY
cat "$OUT/ab-summary.txt"
[[ -s $REC ]] || { log "no run fit before the deadline"; FAILED=1; }
tar czf "$OUT/logs.tgz" -C "$W" --exclude='tree-*' --exclude='unpacked-*' . 2>/dev/null
exit "$FAILED"
