#!/usr/bin/env bash
# Prints why each skipped test skipped, one line per test:
#   skipped: <test>: <reason>
# from a CTest log (default build/Testing/Temporary/LastTest.log), where
# GoogleTest wrote "<file>:<line>: Skipped" and the reason on the next line.
# scripts/test.sh runs it after ctest, so a skip never shows only "***Skipped".
# Usage: scripts/skip-reasons.sh [LASTTEST_LOG]
set -uo pipefail
log=${1:-"$(dirname "$0")/../build/Testing/Temporary/LastTest.log"}
[[ -r $log ]] || { echo "skip-reasons: cannot read $log" >&2; exit 2; }
awk '
  /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); name = $0; said = 0; next }
  /: Skipped$/ && name != "" && !said { want = 1; next }
  want { reason = $0; if (reason == "") reason = "(no reason given)"; print "skipped: " name ": " reason; said = 1; want = 0 }
' "$log"
