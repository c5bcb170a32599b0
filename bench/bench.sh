#!/usr/bin/env bash
# The seed's entry point, kept: the same flags as `smolvm bench run`
# (docs/bench.md), which it calls. Results default to bench/results in this
# repository whatever the current directory.
#   bench/bench.sh --arm fork --n 4 --steps 20 --share on
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
smolvm=${SMOLVM:-$root/build/smolvm}
if [[ ! -x $smolvm ]]; then
  echo "bench.sh: $smolvm is not built (run scripts/setup.sh)" >&2
  exit 1
fi
has_results=0
for a in "$@"; do [[ $a == --results || $a == --results=* ]] && has_results=1; done
if ((has_results)); then
  exec "$smolvm" bench run "$@"
fi
exec "$smolvm" bench run --results "$root/bench/results" "$@"
