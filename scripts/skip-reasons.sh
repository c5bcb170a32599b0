#!/usr/bin/env bash
# Prints why each skipped test skipped, one line per test:
#   skipped: <test>: <reason>
# from a CTest log (default build/Testing/Temporary/LastTest.log): the line
# GoogleTest wrote after "<file>:<line>: Skipped", else (a test skipped by
# its exit code, e.g. the GPU programs) its first line of output. With
# CTEST_OUTPUT (ctest's console output), every test it marks "***Skipped" is
# listed; without it, only GoogleTest skips. scripts/test.sh runs it after
# ctest, so a skip never shows only "***Skipped".
# Usage: scripts/skip-reasons.sh [LASTTEST_LOG [CTEST_OUTPUT]]
set -uo pipefail
log=${1:-"$(dirname "$0")/../build/Testing/Temporary/LastTest.log"}
console=${2:-}
[[ -r $log ]] || { echo "skip-reasons: cannot read $log" >&2; exit 2; }
[[ -z $console || -r $console ]] || { echo "skip-reasons: cannot read $console" >&2; exit 2; }
skipped=""
[[ -n $console ]] && skipped=$(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .*\*\*\*Skipped.*/\1/p' "$console")
awk -v skipped="$skipped" '
  BEGIN { n = split(skipped, list, "\n"); for (i = 1; i <= n; i++) if (list[i] != "") want[list[i]] = 1 }
  /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); name = $0; order[++k] = name; out = 0; next }
  /^Output:$/ { out = 1; getline; next }  # the dashes under it
  /^<end of output>$/ { out = 0; next }
  out && name != "" && !(name in first) && $0 != "" { first[name] = $0 }
  out && /: Skipped$/ && name != "" && !(name in gtest) { getline; gtest[name] = ($0 == "" ? "(no reason given)" : $0) }
  END {
    for (i = 1; i <= k; i++) {
      t = order[i]
      if (t in gtest) print "skipped: " t ": " gtest[t]
      else if (t in want) print "skipped: " t ": " (t in first ? first[t] : "(no output)")
    }
  }
' "$log"
