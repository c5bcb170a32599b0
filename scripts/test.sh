#!/usr/bin/env bash
# Builds if needed and runs every test (unit, integration; GPU tests skip
# with a reason where there is no GPU: each skipped test's reason is printed
# after the run). Ends with "N passed, M failed, K skipped".
# Tests run in parallel, one per core (-j1 among the args runs them one by one).
# Usage: scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
fi
cmake --build build -j"$(nproc)" || exit 1
log=$(mktemp)
trap 'rm -f "$log"' EXIT  # Ctrl-C too
(cd build && ctest --output-on-failure --timeout 300 -j"$(nproc)" "$@") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
failed=$(grep -oE '[0-9]+ tests failed' "$log" | grep -oE '^[0-9]+' | tail -1)
skipped=$(grep -cE '\(Skipped\)|\*\*\*Not Run' "$log")
scripts/skip-reasons.sh build/Testing/Temporary/LastTest.log "$log"
total=${total:-0}; failed=${failed:-0}
echo "$((total - failed - skipped)) passed, ${failed} failed, ${skipped} skipped"
exit "$rc"
