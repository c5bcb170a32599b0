#!/usr/bin/env bash
# Every symbol a program's libraries import from a soname smolvm replaces is
# defined by that shim with the same version tag.
# Usage: check_torch_imports.sh <shim dir> <imports dir (*.txt: name@version per line)>
# Exit 0: all present; 1: some missing (listed); 2: bad usage or a shim missing.
set -euo pipefail
shopt -s nullglob
shim_dir=$1 imports=$2
sonames="libcudart.so.13 libcuda.so.1 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnvidia-ml.so.1"
[[ -d $imports ]] || { echo "no imports directory $imports"; exit 2; }
defined=""
for so in $sonames; do
  [[ -f $shim_dir/$so ]] || { echo "no shim $shim_dir/$so (build it)"; exit 2; }
  # "T name@@version" or "T name@version"; unversioned (NVML) as name@Base.
  defined+=$(nm -D --defined-only "$shim_dir/$so" |
    awk -v so="$so" 'NF == 3 {n = $3; sub(/@@?/, "@", n); if (n !~ /@/) n = n "@Base"; print n}')$'\n'
done
missing=0 checked=0
for f in "$imports"/*.txt; do
  while IFS= read -r sym; do
    ver=${sym##*@}
    [[ $sym == *@* && " $sonames " == *" $ver "* ]] || continue
    checked=$((checked + 1))
    if ! grep -qxF "$sym" <<<"$defined"; then
      echo "missing: $sym (imported by $(basename "$f" .txt))"
      missing=$((missing + 1))
    fi
  done <"$f"
done
(( checked > 0 )) || { echo "no imports of a replaced soname in $imports"; exit 2; }
if (( missing > 0 )); then echo "$missing of $checked imported symbols are not exported by the shims"; exit 1; fi
echo "all $checked imported symbols of the replaced sonames are exported by the shims"
