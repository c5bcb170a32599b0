#!/usr/bin/env bash
# The loader audit of gVisor --cuda machines (src/shim/loader_audit.cc) with
# what torchvision's wheel does: a library whose DT_NEEDED is a renamed copy
# of the runtime (libcudart.faf08d9a.so.13, found by its RPATH) and whose
# version needs name that copy. With the shim preloaded and LD_AUDIT set, the
# copy is the preloaded shim (its calls answer as the shim does, nothing of
# the copy is mapped) and glibc's version check finds it (an audit that
# renamed the bare name stopped the loader: "dl-version.c: ... Assertion
# `needed != NULL' failed", the H100 of 2026-12-07). The copy loaded by path
# is the shim too.
# Usage: check_loader_audit.sh <shim dir>   Exit 0 pass, 1 fail, 2 bad usage.
set -uo pipefail
shim=${1:-}
[[ -f $shim/libcudart.so.13 && -f $shim/libsmolvm-audit.so ]] || { echo "usage: $0 <shim dir with libcudart.so.13 and libsmolvm-audit.so>"; exit 2; }
shim=$(cd "$shim" && pwd)
w=$(mktemp -d /tmp/smolvm-loader-audit.XXXXXX)
trap 'rm -rf "$w"' EXIT
mkdir -p "$w/torchvision" "$w/torchvision.libs"
echo 'int cudaRuntimeGetVersion(int* v) { *v = -1; return 0; }' >"$w/copy.c"
echo 'libcudart.so.13 { global: cudaRuntimeGetVersion; local: *; };' >"$w/copy.map"
cc -shared -fPIC -o "$w/torchvision.libs/libcudart.faf08d9a.so.13" "$w/copy.c" \
  -Wl,-soname,libcudart.faf08d9a.so.13 -Wl,--version-script,"$w/copy.map" || exit 2
cat >"$w/user.c" <<'C'
int cudaRuntimeGetVersion(int* v);
int user_version(void) { int v = 0; cudaRuntimeGetVersion(&v); return v; }
C
cc -shared -fPIC -o "$w/torchvision/_C.so" "$w/user.c" -L"$w/torchvision.libs" -l:libcudart.faf08d9a.so.13 \
  -Wl,-rpath,'$ORIGIN/../torchvision.libs' -Wl,--disable-new-dtags || exit 2
readelf -V "$w/torchvision/_C.so" | grep -q "File: libcudart.faf08d9a.so.13" || { echo "FAIL: no version need on the copy"; exit 1; }
cat >"$w/main.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char** argv) {
  void* h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
  int (*f)(void) = (int (*)(void))dlsym(h, "user_version");
  if (f) printf("version %d\n", f());
  void* c = dlopen(argv[2], RTLD_NOW);
  if (!c) { printf("dlopen: %s\n", dlerror()); return 1; }
  int (*g)(int*) = (int (*)(int*))dlsym(c, "cudaRuntimeGetVersion");
  int v = 0;
  if (g) g(&v);
  printf("by path %d\n", v);
  char line[4096];
  FILE* maps = fopen("/proc/self/maps", "r");
  while (fgets(line, sizeof line, maps)) if (strstr(line, "faf08d9a")) printf("mapped %s", line);
  return 0;
}
C
cc -o "$w/main" "$w/main.c" -ldl || exit 2
native=$("$w/main" "$w/torchvision/_C.so" "$w/torchvision.libs/libcudart.faf08d9a.so.13" 2>&1 | grep -v '^mapped')
[[ $native == $'version -1\nby path -1' ]] || { echo "FAIL: without the shims: $native"; exit 1; }
got=$(env -u SMOLVM_CUDA_SOCKET LD_PRELOAD="$shim/libcudart.so.13" LD_AUDIT="$shim/libsmolvm-audit.so" \
  "$w/main" "$w/torchvision/_C.so" "$w/torchvision.libs/libcudart.faf08d9a.so.13" 2>&1)
rc=$?
want=$'version 13000\nby path 13000'
if ((rc != 0)) || [[ $got != "$want" ]]; then
  echo "FAIL: with the shim preloaded and the loader audit (rc $rc):"
  echo "$got"
  exit 1
fi
echo "PASS: the renamed copy, needed with versions and loaded by path, is the preloaded shim"
