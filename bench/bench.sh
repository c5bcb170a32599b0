#!/usr/bin/env bash
# The seed's entry point, kept: the same flags as `smolvm bench run`
# (docs/bench.md), which it calls. Results go where `bench run` puts them
# ($SMOLVM_HOME/bench/results unless --results says), never into the
# committed H200 set bench/results unless named.
#   bench/bench.sh --arm fork --n 4 --steps 20 --share on
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
smolvm=${SMOLVM:-$root/build/smolvm}
if [[ ! -x $smolvm ]]; then
  echo "bench.sh: $smolvm is not built (run scripts/setup.sh)" >&2
  exit 1
fi
exec "$smolvm" bench run "$@"
