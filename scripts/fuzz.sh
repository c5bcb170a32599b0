#!/usr/bin/env bash
# Fuzzes the daemon's frame decoder and handlers with libFuzzer (Debian's
# clang + libclang-rt-14-dev). New corpus entries land in tests/fuzz/corpus.
# Usage: scripts/fuzz.sh [seconds=60]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSMOLVM_LIBFUZZER=ON -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build build-fuzz --target frame_fuzzer
mkdir -p tests/fuzz/corpus
./build-fuzz/tests/fuzz/frame_fuzzer -max_total_time="$secs" -max_len=4096 -rss_limit_mb=4096 tests/fuzz/corpus
