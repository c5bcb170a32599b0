#!/usr/bin/env bash
# The shim exports exactly the symbols of cudart_symbols.txt, each with its
# version tag, and carries the right SONAME.
# Usage: check_exports.sh <libcudart.so.13> <cudart_symbols.txt>
set -euo pipefail
lib=$1 list=$2
want=$(grep -v '^#' "$list" | awk 'NF==2 {print $1 "@" $2}' | sort)
got=$(objdump -T "$lib" | awk '$0 ~ /^[0-9a-f]+ / && $0 !~ /\*UND\*/ && $(NF-1) != "" {print $NF "@" $(NF-1)}' \
      | grep -v '^libcudart.so.13@' | grep -v '@SMOLVM_SHIM_1$' | sort)
# Besides NVIDIA's symbols, exactly one of our own: the guest library's hook.
# (grep reads a variable, not a pipe: grep -q closing early would SIGPIPE
# objdump and fail the pipeline under pipefail.)
dynsyms=$(objdump -T "$lib")
grep -q ' SMOLVM_SHIM_1 *smolvm_shim_cuda_hooks$' <<<"$dynsyms" ||
  { echo "smolvm_shim_cuda_hooks@SMOLVM_SHIM_1 is not exported"; exit 1; }
if ! diff <(echo "$want") <(echo "$got") >/dev/null; then
  echo "exported symbols differ from $list (< wanted, > exported):"
  diff <(echo "$want") <(echo "$got") | head -20
  exit 1
fi
objdump -p "$lib" | grep -q 'SONAME *libcudart.so.13' || { echo "SONAME is not libcudart.so.13"; exit 1; }
echo "$(echo "$want" | wc -l) symbols exported with their version tags"
