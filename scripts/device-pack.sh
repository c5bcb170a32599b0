#!/usr/bin/env bash
# Copies what the GPU machine needs from a build tree into a small, stripped
# tree to carry (the device tool carries at most 64 MiB): executables and
# shared libraries (stripped), the shim folder as it is (marker file and
# proto-hash included), the CTest files and CMakeCache.txt (which
# scripts/device-check.sh uses to relocate the CTest files).
#
# Usage: [GPU_ONLY=1] scripts/device-pack.sh [BUILD_DIR=build] [DEST=.carry/build]
# GPU_ONLY=1 leaves out every test executable (*_test) that no gpu-labelled
# CTest test runs, and the fuzzers: what an A/B's arm needs (scripts/device-ab.sh:
# smolvm, the shims, tests/gpu, tests/shim/bin, the gpu tests), about half the
# size, so two builds fit the carry's 64 MiB as tarballs.
# DEST/SOURCE_COMMIT names the checkout it was built from (`git describe
# --always --dirty` where CMakeCache.txt says its source is): device summaries and records name it beside the
# binary's sha256. Then carry DEST; scripts/device-check.sh finds .carry/build by itself when
# there is no build/ (or pass --build DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build}
dest=${2:-.carry/build}
[[ -f $src/CMakeCache.txt ]] || { echo "device-pack: $src is not a build tree" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
# The checkout the build tree was configured from (another worktree's, for
# an A/B's previous build), else this one.
src_dir=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$src/CMakeCache.txt" 2>/dev/null)
git -C "${src_dir:-.}" describe --always --dirty >"$dest/SOURCE_COMMIT" 2>/dev/null || echo unknown >"$dest/SOURCE_COMMIT"
cd "$src"
gpu_tests=""
if [[ ${GPU_ONLY:-0} == 1 ]]; then
  gpu_tests=$(ctest -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, sys
for t in json.load(sys.stdin)["tests"]:
    c = t.get("command") or []
    if c: print(os.path.relpath(c[0]))')
fi
keep() {  # GPU_ONLY: a test executable only when a gpu test runs it
  [[ ${GPU_ONLY:-0} == 1 ]] || return 0
  case $1 in
    ./tests/fuzz/*) return 1 ;;
    *_test) grep -qxF "${1#./}" <<<"$gpu_tests" ;;
    *) return 0 ;;
  esac
}
{
  find . -path ./CMakeFiles -prune -o -path ./fuzz-clang -prune -o -path '*/CMakeFiles' -prune -o -type f \
    \( -name 'CTestTestfile.cmake' -o -name '*_tests.cmake' -o -name '*_include.cmake' \) -print
  echo ./CMakeCache.txt
  [[ -d shim ]] && find shim -path '*/CMakeFiles' -prune -o \( -type f -o -type l \) -print | grep -v '\.o$\|\.a$\|\.ninja\|cmake_install' || true
  [[ -d torch-learner ]] && find torch-learner -type f -print || true  # the torch learner beside smolvm (bench --learner torch)
  find . -path '*/CMakeFiles' -prune -o -path ./fuzz-clang -prune -o -type f -perm -u+x -print | while read -r f; do
    if [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]]; then echo "$f"; fi
  done
  find . -path '*/CMakeFiles' -prune -o -path ./fuzz-clang -prune -o -type f -name '*.so*' -print
} | sort -u | while read -r f; do
  keep "$f" || continue
  mkdir -p "$dest/$(dirname "$f")"
  cp -a "$f" "$dest/$f"
done
find "$dest" -type f | while read -r f; do
  [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] && strip --strip-unneeded "$f" 2>/dev/null || true
done
du -sh "$dest"
