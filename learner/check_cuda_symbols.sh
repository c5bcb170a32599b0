#!/usr/bin/env bash
# Usage: check_cuda_symbols.sh BINARY ALLOWED_LIST
# Fails when BINARY imports a CUDA runtime / cuBLAS symbol not in the list,
# or any graph, stream-ordered or managed allocation call, or when it links
# the CUDA libraries statically (then it imports none and the shim is bypassed).
set -euo pipefail
bin=$1 allowed=$2
syms=$(nm -D --undefined-only "$bin" | awk '{print $2}' | sed 's/@.*//' | grep -E '^(__cuda|cuda|cublas)' | sort -u)
if [[ -z "$syms" ]]; then
  echo "FAIL: $bin imports no CUDA symbols (static cudart?)"; exit 1
fi
bad=0
for s in $syms; do
  if [[ "$s" =~ ^cuda(Graph|MallocAsync|MallocManaged|FreeAsync|MallocFromPool) ]]; then
    echo "FAIL: forbidden CUDA call $s"; bad=1
  elif ! grep -qx "$s" <(grep -v '^#' "$allowed"); then
    echo "FAIL: $s is not in $allowed"; bad=1
  fi
done
for lib in libcudart libcublas; do
  if ! readelf -d "$bin" | grep -q "NEEDED.*$lib"; then echo "FAIL: $bin does not link $lib dynamically"; bad=1; fi
done
[[ $bad == 0 ]] && echo "OK: $(echo "$syms" | wc -l) CUDA symbols, all allowed"
exit $bad
