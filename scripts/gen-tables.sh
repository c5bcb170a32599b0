#!/usr/bin/env bash
# Regenerates every table of figures in README.md, docs/PERF.md and
# bench/RESULTS.md from the committed records (bench/results/*.json,
# bench/records/*.json), and redraws bench/plots/bench.png (with gnuplot). CI runs `scripts/gen-tables.sh --check` (CTest
# generated_tables_are_current): a record changed without regenerated tables
# fails. Builds build/smolvm if it is missing.
# Usage: scripts/gen-tables.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x build/smolvm ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build --target smolvm
fi
build/smolvm bench tables --root . "$@"
# The README's plot, drawn from the same results (CTest generated_plot_is_current).
if [[ ${1:-} != --check ]] && command -v gnuplot >/dev/null; then
  build/smolvm bench plot bench/results --out bench/plots/bench.png
fi
