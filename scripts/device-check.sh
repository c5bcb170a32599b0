#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with build/ carried
# over (built elsewhere; nothing is compiled here). In one call, about 8
# minutes at most:
#
#   env         GPU, driver, which files are present; nvidia-smi memory.used at start
#   gpu-tests   the gpu-labelled CTest tests (SMOLVM_REQUIRE_GPU=1: no silent skips)
#   programs    each tests/gpu program natively, then through the shim and the
#               daemon (build/smolvm _cuda-daemon SOCK --backend cuda); stdout diffed
#   concurrent  the faulting program and a correct one at once through the shim
#   bench       micro_bench natively and through the shim (JSON lines)
#   memory      after the daemon is stopped: GPU memory back at its start value
#
# Whatever is missing (shim, daemon, a program) is reported as MISSING and
# the rest still runs, so the script gives native baselines from day one.
# Every phase is time-boxed and failures do not stop later phases.
#
# Usage: scripts/device-check.sh [--phase NAME[,NAME...]] [--backend cuda|fake]
#                                [--build DIR] [--deadline SECONDS] [--list]
# The build tree is build/, else .carry/build (what scripts/device-pack.sh
# makes), else --build DIR.
# Output: everything under $OUT (default ./device-check-out): summary.txt,
# bench.jsonl, diffs.txt and logs.tar.gz (all logs), at most 8 files.
# Exit status: 0 when every phase that ran passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/lib.sh

ALL_PHASES=(env gpu-tests programs concurrent bench memory)
PROGRAMS=(devquery vecadd reduce streams memcpy_kinds kernel_params illegal_address)
PHASES=()
BACKEND=cuda
BUILD_ARG=""
DEADLINE=470  # seconds for the whole run; phases shrink their time-box to fit

while (($#)); do
  case "$1" in
    --phase) IFS=, read -r -a PHASES <<<"$2"; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --build) BUILD_ARG=$(cd "$2" && pwd); shift 2 ;;
    --deadline) DEADLINE=$2; shift 2 ;;
    --list) printf '%s\n' "${ALL_PHASES[@]}"; exit 0 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "device-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#PHASES[@]})) || PHASES=("${ALL_PHASES[@]}")
for p in "${PHASES[@]}"; do
  [[ " ${ALL_PHASES[*]} " == *" $p "* ]] || { echo "device-check: unknown phase '$p' (--list)" >&2; exit 2; }
done

if [[ -n $BUILD_ARG ]]; then BUILD=$BUILD_ARG; else BUILD=""; find_build; fi
OUT=${OUT:-$ROOT/device-check-out}
mkdir -p "$OUT"
make_workdir device-check
WORK=$W
LOGS=$WORK/logs
LOG_FILE=$LOGS/device-check.log LOG_FD=2
mkdir -p "$LOGS"/{native,shim,concurrent,bench,tests}
SOCK=$WORK/cuda.sock
BIN=$BUILD/tests/gpu
SHIM_DIR=$BUILD/shim
SMOLVM=$BUILD/smolvm
SUMMARY=()
FAILED=0
START_MEM=""

# record PHASE STATUS NOTE: STATUS is PASS, FAIL, MISSING or SKIP.
record() {
  SUMMARY+=("$(printf '%-16s %-8s %5ss  %s' "$1" "$2" "$SECONDS" "$3")")
  [[ $2 == FAIL ]] && FAILED=1
  log "$1: $2 $3"
}

# The time-box for a step: its own limit, cut to what is left of the deadline.
box() {
  local want=$1 left=$((DEADLINE - SECONDS - 15))
  ((left < 5)) && left=5
  echo $((want < left ? want : left))
}
out_of_time() { ((SECONDS > DEADLINE - 20)); }

gpu_mem_used() { local m; m=$(smi_used); echo "${m:-unknown}"; }

have_shim() { [[ -f $SHIM_DIR/libcudart.so.13 ]]; }
have_daemon() { [[ -x $SMOLVM ]] && "$SMOLVM" _cuda-daemon --help >/dev/null 2>&1; }

start_daemon() {
  [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null && return 0
  if ! have_daemon; then
    log "daemon: MISSING ($SMOLVM _cuda-daemon not available)"
    return 1
  fi
  daemon_start "$SOCK" "$LOGS/daemon.log" --backend "$BACKEND"
  local rc=$?
  echo "$DAEMON_PID" >"$LOGS/daemon.pid"
  log "daemon: started pid $DAEMON_PID on $SOCK (backend $BACKEND)"
  ((rc == 0)) || log "daemon: no admin socket after 20 s (see daemon.log)"
  return "$rc"
}

# Stops the daemon we started (daemon_stop: TERM, then KILL to its process
# group after 10 s).
stop_daemon() {
  [[ -n $DAEMON_PID ]] || return 0
  local pid=$DAEMON_PID
  daemon_stop
  log "daemon: pid $pid exited with $DAEMON_RC"
}

# The programs find the toolkit's libcudart through their RUNPATH
# (/usr/local/cuda/lib64). Where that is missing, look for libcudart.so.13
# elsewhere (other toolkit paths, the pip wheel torch uses) and put its folder
# on LD_LIBRARY_PATH for native runs (after the shim for shim runs).
NATIVE_LIB_DIR=""
find_native_cudart() {
  [[ -x $BIN/vecadd ]] || return 0
  ldd "$BIN/vecadd" 2>/dev/null | grep -q 'libcudart.so.13 => not found' || return 0
  local d
  for d in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu \
           $(python3 -c 'import glob,site; print(" ".join(sorted({p.rsplit("/",1)[0] for s in site.getsitepackages() for p in glob.glob(s+"/nvidia/cu*/lib/libcudart.so.13")+glob.glob(s+"/nvidia/cuda_runtime/lib/libcudart.so.13")})))' 2>/dev/null); do
    if [[ -f $d/libcudart.so.13 ]]; then
      NATIVE_LIB_DIR=$d
      log "native libcudart.so.13 from $d (not at the RUNPATH /usr/local/cuda/lib64)"
      return 0
    fi
  done
  log "no libcudart.so.13 for native runs anywhere; native programs will fail to load"
}

native_env() {
  if [[ -n $NATIVE_LIB_DIR ]]; then
    env LD_LIBRARY_PATH="$NATIVE_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
  else
    "$@"
  fi
}

shim_env() {
  local lp=$SHIM_DIR${NATIVE_LIB_DIR:+:$NATIVE_LIB_DIR}
  env LD_LIBRARY_PATH="$lp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" SMOLVM_CUDA_SOCKET="$SOCK" "$@"
}

# run_prog MODE NAME DIR [ARGS...]: runs one program natively or through the
# shim, stdout/stderr/rc under DIR.
run_prog() {
  local mode=$1 name=$2 dir=$3
  shift 3
  local t
  t=$(box 90)
  if [[ $mode == shim ]]; then
    shim_env timeout -k 5 "$t" "$BIN/$name" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  else
    native_env timeout -k 5 "$t" "$BIN/$name" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  fi
  local rc=$?
  echo "$rc" >"$dir/$name.rc"
  return "$rc"
}

finish() {
  [[ -n ${FINISHED:-} ]] && return
  FINISHED=1
  {
    echo "smolvm device check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname), checkout $(git rev-parse --short HEAD 2>/dev/null || echo unknown), build of $(cat "$BUILD/SOURCE_COMMIT" 2>/dev/null || echo "an unpacked tree")"
    printf '%-16s %-8s %6s  %s\n' phase status at note
    printf '%s\n' "${SUMMARY[@]}"
    echo "overall: $([[ $FAILED == 0 ]] && echo PASS || echo FAIL)"
  } >"$OUT/summary.txt"
  cat "$OUT/summary.txt"
  cat "$LOGS"/bench/*.jsonl >"$OUT/bench.jsonl" 2>/dev/null || true
  [[ -f $LOGS/diffs.txt ]] && cp "$LOGS/diffs.txt" "$OUT/diffs.txt"
  cp "$OUT/summary.txt" "$LOGS/"
  tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs
}
on_exit finish
on_exit stop_daemon
trap 'log "interrupted"; exit 1' INT TERM

# --- phases -------------------------------------------------------------------

phase_env() {
  START_MEM=$(gpu_mem_used)
  echo "$START_MEM" >"$LOGS/mem_start.txt"
  {
    echo "== nvidia-smi"; nvidia-smi 2>&1 || echo "nvidia-smi not available"
    echo "== uname"; uname -a
    echo "== os"; cat /etc/os-release 2>/dev/null | head -3
    echo "== toolkit"; ls -d /usr/local/cuda* 2>&1; /usr/local/cuda/bin/nvcc --version 2>&1 | tail -2
    echo "== files"
    for f in "$SMOLVM" "$SHIM_DIR/libcudart.so.13" "$SHIM_DIR/.smolvm-shim" "$SHIM_DIR/proto-hash" \
             "$BUILD/src/backend/backend_conformance_test" "$BIN/micro_bench"; do
      [[ -e $f ]] && echo "present  $f" || echo "MISSING  $f"
    done
    for p in "${PROGRAMS[@]}"; do [[ -x $BIN/$p ]] && echo "present  $BIN/$p" || echo "MISSING  $BIN/$p"; done
    echo "== libcudart a program loads natively / through the shim"
    native_env ldd "$BIN/vecadd" 2>&1 | grep -E 'cudart|not found'
    shim_env ldd "$BIN/vecadd" 2>&1 | grep -E 'cudart|not found'
    [[ -x $SMOLVM ]] && { echo "== smolvm"; "$SMOLVM" --version 2>&1; "$SMOLVM" --proto-hash 2>&1; }
  } >"$LOGS/env.txt" 2>&1
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 2>/dev/null || echo "no nvidia-smi")
  local missing=""
  [[ -x $SMOLVM ]] || missing+=" smolvm"
  have_shim || missing+=" shim"
  [[ -d $BIN ]] || missing+=" tests/gpu"
  record env PASS "$gpu; memory.used at start ${START_MEM} MiB${missing:+; missing:$missing}"
}

# CTest files hold the absolute paths of the machine that configured the
# build; point them at this checkout first (in this copy of build/ only).
relocate_ctest_files() {
  local cache=$BUILD/CMakeCache.txt old_build old_src
  [[ -f $cache ]] || return 1
  old_build=$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$cache")
  old_src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")
  [[ -n $old_build && -n $old_src ]] || return 1
  [[ $old_build == "$BUILD" && $old_src == "$ROOT" ]] && return 0
  log "gpu-tests: relocating CTest files from $old_build to $BUILD"
  find "$BUILD/" \( -name 'CTestTestfile.cmake' -o -name '*_tests.cmake' -o -name '*_include.cmake' \) \
    -print0 | xargs -0 -r sed -i -e "s|$old_build|$BUILD|g" -e "s|$old_src|$ROOT|g"
  sed -i -e "s|^CMAKE_CACHEFILE_DIR:INTERNAL=.*|CMAKE_CACHEFILE_DIR:INTERNAL=$BUILD|" \
    -e "s|^CMAKE_HOME_DIRECTORY:INTERNAL=.*|CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT|" "$cache"
}

phase_gpu_tests() {
  local log=$LOGS/tests/ctest-gpu.log t
  t=$(box 150)
  if command -v ctest >/dev/null && relocate_ctest_files; then
    (cd "$BUILD" && SMOLVM_REQUIRE_GPU=1 native_env timeout -k 5 "$t" ctest -L gpu --output-on-failure --timeout 120) >"$log" 2>&1
    local rc=$?
    local line
    line=$(grep -E 'tests passed|No tests were found' "$log" | tail -1)
    local skipped
    skipped=$(grep -cE '\(Skipped\)' "$log")
    [[ $rc == 0 && $skipped == 0 ]] && record gpu-tests PASS "$line" ||
      record gpu-tests FAIL "rc=$rc, $skipped skipped; ${line:-see tests/ctest-gpu.log}"
  else
    # No ctest (or no cache): run the known gpu test binaries directly.
    local b=$BUILD/src/backend/backend_conformance_test
    [[ -x $b ]] || { record gpu-tests MISSING "no ctest and no $b"; return; }
    SMOLVM_REQUIRE_GPU=1 timeout -k 5 "$t" "$b" --gtest_filter='*/cuda' >"$log" 2>&1
    local rc=$?
    [[ $rc == 0 ]] && record gpu-tests PASS "backend_conformance_test */cuda (no ctest)" ||
      record gpu-tests FAIL "backend_conformance_test */cuda rc=$rc"
  fi
}

phase_programs() {
  [[ -d $BIN ]] || { record programs MISSING "$BIN not built"; return; }
  local n_ok=0 n_total=0 notes=""
  for p in "${PROGRAMS[@]}"; do
    out_of_time && { notes+=" out-of-time"; break; }
    [[ -x $BIN/$p ]] || { notes+=" $p:MISSING"; continue; }
    n_total=$((n_total + 1))
    run_prog native "$p" "$LOGS/native"
    local rc=$?
    local want=0
    [[ $rc == "$want" ]] || notes+=" $p:native-rc=$rc"
  done
  local native_note="native: $((n_total))/${#PROGRAMS[@]} run${notes}"
  if ! have_shim; then
    record programs-native "$([[ $notes == *rc=* ]] && echo FAIL || echo PASS)" "$native_note"
    record programs-shim MISSING "no $SHIM_DIR/libcudart.so.13; native outputs kept as baselines"
    return
  fi
  record programs-native "$([[ $notes == *rc=* ]] && echo FAIL || echo PASS)" "$native_note"
  if ! start_daemon; then
    record programs-shim MISSING "daemon not running (see daemon.log)"
    return
  fi
  local same=0 differ=""
  : >"$LOGS/diffs.txt"
  for p in "${PROGRAMS[@]}"; do
    out_of_time && { differ+=" out-of-time"; break; }
    [[ -x $BIN/$p ]] || continue
    run_prog shim "$p" "$LOGS/shim"
    local rc_n rc_s
    rc_n=$(cat "$LOGS/native/$p.rc" 2>/dev/null || echo none)
    rc_s=$(cat "$LOGS/shim/$p.rc")
    # Identical output only counts when both runs passed their own checks.
    if [[ $rc_n == 0 && $rc_s == 0 ]] && diff -q "$LOGS/native/$p.out" "$LOGS/shim/$p.out" >/dev/null 2>&1; then
      same=$((same + 1))
    else
      differ+=" $p(rc $rc_n/$rc_s)"
      { echo "=== $p: native rc $rc_n, shim rc $rc_s"
        diff "$LOGS/native/$p.out" "$LOGS/shim/$p.out"
        echo "--- shim stderr (tail)"; tail -5 "$LOGS/shim/$p.err"; } >>"$LOGS/diffs.txt" 2>&1
    fi
  done
  kill -0 "$DAEMON_PID" 2>/dev/null || differ+=" DAEMON-DIED"
  [[ -z $differ ]] && record programs-shim PASS "$same programs bit-identical to native" ||
    record programs-shim FAIL "$same identical; differ:$differ (diffs.txt)"
}

phase_concurrent() {
  have_shim || { record concurrent MISSING "no shim"; return; }
  start_daemon || { record concurrent MISSING "daemon not running"; return; }
  local dir=$LOGS/concurrent
  # Native references, if the programs phase did not run.
  for p in illegal_address streams; do
    [[ -f $LOGS/native/$p.out ]] || run_prog native "$p" "$LOGS/native"
  done
  run_prog shim illegal_address "$dir" &
  local pid_bad=$!
  run_prog shim streams "$dir" &
  local pid_good=$!
  wait "$pid_bad"
  wait "$pid_good"
  local notes="" status=PASS
  diff -q "$LOGS/native/illegal_address.out" "$dir/illegal_address.out" >/dev/null 2>&1 ||
    { status=FAIL; notes+=" faulting program's errors differ from native;"; }
  diff -q "$LOGS/native/streams.out" "$dir/streams.out" >/dev/null 2>&1 && [[ $(cat "$dir/streams.rc") == 0 ]] ||
    { status=FAIL; notes+=" concurrent correct program failed or differs (rc $(cat "$dir/streams.rc"));"; }
  kill -0 "$DAEMON_PID" 2>/dev/null || { status=FAIL; notes+=" daemon died;"; }
  # The daemon still serves a fresh session after the fault.
  run_prog shim vecadd "$dir"
  diff -q "$LOGS/native/vecadd.out" "$dir/vecadd.out" >/dev/null 2>&1 ||
    [[ ! -f $LOGS/native/vecadd.out ]] || { status=FAIL; notes+=" vecadd after the fault differs;"; }
  record concurrent "$status" "${notes:-fault stayed in its session; streams and a later vecadd correct}"
}

phase_bench() {
  [[ -x $BIN/micro_bench ]] || { record bench MISSING "no micro_bench"; return; }
  local t status=PASS notes=""
  t=$(box 120)
  native_env timeout -k 5 "$t" "$BIN/micro_bench" all --label native >"$LOGS/bench/native.jsonl" 2>"$LOGS/bench/native.err"
  local rc=$?
  ((rc == 0)) || { status=FAIL; notes+=" native rc=$rc"; }
  if have_shim && start_daemon; then
    t=$(box 180)
    shim_env timeout -k 5 "$t" "$BIN/micro_bench" all --label shim >"$LOGS/bench/shim.jsonl" 2>"$LOGS/bench/shim.err"
    rc=$?
    ((rc == 0)) || { status=FAIL; notes+=" shim rc=$rc"; }
  else
    notes+=" shim MISSING"
  fi
  record bench "$status" "$(cat "$LOGS"/bench/*.jsonl 2>/dev/null | wc -l) JSON lines (bench.jsonl)${notes}"
  # One record per run for bench/records (docs/bench.md, "Records").
  python3 "$ROOT/scripts/device-record.py" micro-bench --out "$OUT" --command "scripts/device-check.sh --phase bench" \
    "$LOGS"/bench/native.jsonl "$LOGS"/bench/shim.jsonl >&2 || notes+=" (no record written)"
  # One short line per result in the log, for the summary reader.
  grep -h '' "$LOGS"/bench/*.jsonl 2>/dev/null | sed 's/^/  /' >&2
}

phase_memory() {
  stop_daemon
  local start=${START_MEM:-$(cat "$LOGS/mem_start.txt" 2>/dev/null || echo unknown)} now=""
  [[ $start == unknown || -z $start ]] && { record memory SKIP "no start value (run with the env phase)"; return; }
  for _ in $(seq 30); do
    now=$(gpu_mem_used)
    [[ $now == "$start" ]] && break
    sleep 0.5
  done
  [[ $now == "$start" ]] && record memory PASS "memory.used back at ${start} MiB" ||
    record memory FAIL "memory.used ${now} MiB, was ${start} MiB at start"
}

# --- main ---------------------------------------------------------------------

log "phases: ${PHASES[*]}; build tree $BUILD; logs in $WORK, results in $OUT"
find_native_cudart
# The memory check needs a start value even when env is not asked for.
[[ " ${PHASES[*]} " == *" memory "* && " ${PHASES[*]} " != *" env "* ]] && START_MEM=$(gpu_mem_used)
for p in "${PHASES[@]}"; do
  if out_of_time && [[ $p != memory ]]; then
    record "$p" SKIP "deadline (${DEADLINE}s) reached"
    continue
  fi
  "phase_${p//-/_}"
done
exit "$FAILED"
