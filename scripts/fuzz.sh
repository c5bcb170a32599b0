#!/usr/bin/env bash
# Fuzzes a worker's serve loop (frames with descriptors, tests/fuzz/frame_fuzzer.cc)
# with libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer (Debian's
# clang + libclang-rt-14-dev).
#
# Usage: scripts/fuzz.sh [SECONDS=60]
#          builds build-fuzz/ and fuzzes for SECONDS; new corpus entries land
#          in tests/fuzz/corpus
#        scripts/fuzz.sh --ci FUZZER RUNS
#          CTest's frame_fuzz: RUNS executions of the built FUZZER from
#          the checked-in corpus (read only: new entries go to a temporary
#          directory, removed after); prints the rate. SMOLVM_FUZZ_RUNS, when
#          set, replaces RUNS (SMOLVM_FUZZ_RUNS=100000 ctest -R frame_fuzz).
# Exit status: 0 no finding; libFuzzer's own (1, or a sanitizer's) on a
# crash, leak or timeout, with the reproducer under $TMPDIR; 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --ci ]]; then
  (($# == 3)) || { echo "usage: scripts/fuzz.sh --ci FUZZER RUNS" >&2; exit 2; }
  fuzzer=$(readlink -f "$2") runs=${SMOLVM_FUZZ_RUNS:-$3}
  [[ -x $fuzzer ]] || { echo "fuzz: $fuzzer is not built" >&2; exit 2; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/smolvm-fuzz.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  mkdir "$work/new"
  start=$(date +%s.%N)
  rc=0
  (cd "$work" && "$fuzzer" -runs="$runs" -seed=1 -max_len=4096 -rss_limit_mb=4096 -timeout=20 \
    -print_final_stats=1 "$work/new" "$OLDPWD/tests/fuzz/corpus") >"$work/log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  tail -25 "$work/log"
  done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  python3 -c "import sys; r, s = int(sys.argv[1] or 0), float(sys.argv[2]); print(f'fuzz: {r} executions in {s:.1f} s ({r / s:.0f}/s), exit {sys.argv[3]}')" \
    "${done_runs:-0}" "$(python3 -c "print($end - $start)")" "$rc"
  if ((rc != 0)); then
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
      [[ -e $f ]] && cp "$f" "${TMPDIR:-/tmp}/" && echo "fuzz: reproducer ${TMPDIR:-/tmp}/$(basename "$f")"
    done
    exit "$rc"
  fi
  ((${done_runs:-0} >= runs)) || { echo "fuzz: only ${done_runs:-0} of $runs executions ran" >&2; exit 1; }
  exit 0
fi

secs=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSMOLVM_LIBFUZZER=ON -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-fuzz --target frame_fuzzer
mkdir -p tests/fuzz/corpus
./build-fuzz/tests/fuzz/frame_fuzzer -max_total_time="$secs" -max_len=4096 -rss_limit_mb=4096 tests/fuzz/corpus
