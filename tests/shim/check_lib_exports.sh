#!/usr/bin/env bash
# A library shim exports exactly the functions of its symbol list, each with
# its version tag ("Base" = unversioned, as NVML), and carries the soname.
# Usage: check_lib_exports.sh <lib> <symbols.txt> <soname>
set -euo pipefail
lib=$1 list=$2 soname=$3
want=$(grep -v '^#' "$list" | awk 'NF==2 {print $1 "@" $2}' | sort)
# Defined dynamic symbols, minus the version-definition entries themselves.
got=$(objdump -T "$lib" | awk '$0 ~ /^[0-9a-f]+ / && $0 !~ /\*UND\*/ && $0 !~ /\*ABS\*/ {print $NF "@" $(NF-1)}' | sort)
if ! diff <(echo "$want") <(echo "$got") >/dev/null; then
  echo "exported symbols differ from $list (< wanted, > exported):"
  diff <(echo "$want") <(echo "$got") | head -20
  exit 1
fi
objdump -p "$lib" | grep -q "SONAME *${soname//./\\.}\$" || { echo "SONAME is not $soname"; exit 1; }
echo "$(echo "$want" | wc -l) symbols exported with their version tags"
