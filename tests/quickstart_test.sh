#!/usr/bin/env bash
# Issue 17: `scripts/quickstart.sh --no-setup` on the built tree (CPU path
# without a GPU) says where its results went, replaces the previous
# quickstart's results and logs instead of piling them up, and leaves
# `git status` as it was. Needs root (exit 77: skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) != 0 ]]; then echo "quickstart needs root (CI runs it as root)"; exit 77; fi
mkdir -p build/quickstart/logs/an-old-run
before=$(git status --porcelain 2>/dev/null)
out=$(scripts/quickstart.sh --no-setup 2>&1); rc=$?
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
check '((rc == 0))' "quickstart exited $rc: $(tail -5 <<<"$out")"
check 'grep -q "^quickstart: results in build/quickstart/results (one JSON per run), logs in build/quickstart/logs$" <<<"$out"' \
  "quickstart does not say where its results went"
check '[[ ! -e build/quickstart/logs/an-old-run ]]' "an earlier quickstart's logs are still there"
check '(($(ls build/quickstart/results/*.json | wc -l) == 2))' "not one result per arm in build/quickstart/results"
check '(($(ls -d build/quickstart/logs/*/ | wc -l) == 2))' "not one log directory per arm"
check 'grep -q "peak_pss=" <<<"$out" || grep -q "peak_gpu=" <<<"$out"' "no peak memory in the summary lines"
check '[[ $(git status --porcelain 2>/dev/null) == "$before" ]]' "git status changed: $(git status --porcelain)"
((fail == 0)) && echo "quickstart test: PASS"
exit $fail
