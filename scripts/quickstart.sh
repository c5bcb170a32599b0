#!/usr/bin/env bash
# The main job: set everything up, then run the native vs fork learner
# benchmark at a small size and summarize it.
#   GPU (nvidia-smi sees one): qwen2.5-0.5b preset, N=4, 20 steps, 2x256.
#   no GPU: the CPU path — tiny preset, N=2, 20 steps, 2x64.
# Results: build/quickstart/results (one JSON per run), logs in
# build/quickstart/logs; both replaced by the next quickstart.
# Needs root (learners run in cgroups, the fork arm in machines); uses sudo
# otherwise.
# Usage: scripts/quickstart.sh [--no-setup]   (--no-setup: use the build/ that
# is there, e.g. one carried to a machine without a package registry)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "")
    # Only what the main job runs (about 40 % of the build steps on the CPU
    # path); scripts/test.sh builds the tests and the rest.
    echo "quickstart: building what the main job runs (scripts/test.sh builds the rest); setup prints how long it took"
    scripts/setup.sh --main ;;
  --no-setup) [[ -x build/smolvm ]] || { echo "quickstart: --no-setup needs build/smolvm (run scripts/setup.sh)" >&2; exit 2; } ;;
  *) echo "quickstart: unknown argument '$1' (usage: scripts/quickstart.sh [--no-setup])" >&2; exit 2 ;;
esac

sudo=""
[[ $(id -u) == 0 ]] || sudo="sudo"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "quickstart: GPU found: qwen2.5-0.5b, N=4, both arms"
  args=(--device cuda --model qwen2.5-0.5b --n 4 --steps 20 --batch 2 --maxseq 256 --cpus 2 --share on)
else
  echo "quickstart: no GPU found: the CPU path (tiny preset, N=2, both arms)"
  args=(--device cpu --model tiny --n 2 --steps 20 --batch 2 --maxseq 64 --cpus 1 --share on)
fi
results=build/quickstart/results
rm -rf build/quickstart  # this run's results and logs only
for arm in native fork; do
  echo "quickstart: bench run --arm $arm"
  $sudo build/smolvm bench run --arm "$arm" "${args[@]}" --results "$results"
done
echo "quickstart: summary"
build/smolvm bench summarize "$results"
build/smolvm bench census "$results" | tail -1
echo "quickstart: results in $results (one JSON per run), logs in build/quickstart/logs"
