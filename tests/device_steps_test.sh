#!/usr/bin/env bash
# scripts/device-steps.sh, the one-call step runner for the GPU machine:
# each step's files come back as NAME.tgz with its console; rc, time-outs and
# deadline skips are in steps.txt; a carried .carry/build.tgz is unpacked;
# a bad plan exits 2 before anything runs.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
t=$(mktemp -d /tmp/smolvm-steps-test.XXXXXX)
trap 'rm -rf "$t"' EXIT
fails=0
check() {  # NAME CONDITION...
  local name=$1
  shift
  if "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fails=$((fails + 1)); fi
}

mkdir -p "$t/repo/scripts" "$t/pack"
cp "$src/scripts/device-steps.sh" "$src/scripts/lib.sh" "$t/repo/scripts/"
printf '#!/bin/sh\necho smolvm\n' >"$t/pack/smolvm" && chmod +x "$t/pack/smolvm"
mkdir -p "$t/repo/.carry" && tar czf "$t/repo/.carry/build.tgz" -C "$t/pack" .
cat >"$t/plan" <<'PLAN'
# a comment, then four steps
good 20 echo hello >"$OUT/a.txt"; build/smolvm
bad 20 echo trying; exit 3
slow 1 sleep 30
late 100 echo never
PLAN
OUT=$t/out DEADLINE=60 "$t/repo/scripts/device-steps.sh" "$t/plan" >"$t/console" 2>&1
rc=$?
check "a failed step makes the exit status 1" [ "$rc" = 1 ]
check "the carried build.tgz is unpacked" [ -x "$t/repo/.carry/build/smolvm" ]
check "steps.txt says each step's rc" grep -q '^good rc=0 .*: smolvm$' "$t/out/steps.txt"
check "a step's non-zero rc is kept" grep -q '^bad rc=3 ' "$t/out/steps.txt"
check "a step past its time box is ended (124)" grep -q '^slow rc=124 ' "$t/out/steps.txt"
check "a step past the deadline is skipped" grep -q '^late skipped: ' "$t/out/steps.txt"
mkdir -p "$t/x" && tar xzf "$t/out/good.tgz" -C "$t/x"
check "a step's files come back in NAME.tgz" [ "$(cat "$t/x/good/a.txt" 2>/dev/null)" = hello ]
check "with its console" grep -q smolvm "$t/x/good/console.txt"
check "nothing else comes back" [ "$(ls "$t/out" | tr '\n' ' ')" = "bad.tgz good.tgz slow.tgz steps.txt " ]
check "the work folder is removed" [ -z "$(grep -o '/tmp/device-steps\.[A-Za-z0-9]*' "$t/console" | sort -u | while read -r d; do [[ -e $d ]] && echo "$d"; done)" ]

for plan in 'nonumber x echo' 'twice 5 true
twice 5 true' 'only 5'; do
  printf '%s\n' "$plan" | OUT=$t/out2 "$t/repo/scripts/device-steps.sh" - >/dev/null 2>&1
  rc=$?
  check "a bad plan exits 2 (${plan%%$'\n'*})" [ "$rc" = 2 ]
done
seq 8 | sed 's/^/s/; s/$/ 5 true/' | OUT=$t/out2 "$t/repo/scripts/device-steps.sh" - >/dev/null 2>&1
check "more than 7 steps exit 2" [ $? = 2 ]
check "a bad plan runs nothing" [ ! -e "$t/out2/steps.txt" ]
# --check: the committed plans name scripts that exist and fit a call.
for plan in "$src"/scripts/plans/*.plan; do
  (cd "$src" && scripts/device-steps.sh --check "$plan" >/dev/null)
  rc=$?
  check "the committed plan $(basename "$plan") checks" [ "$rc" = 0 ]
done
printf 'x 100 scripts/no-such.sh\n' | (cd "$src" && scripts/device-steps.sh --check - >/dev/null 2>&1)
rc=$?
check "--check refuses a missing script" [ "$rc" = 2 ]
printf 'x 400 true\ny 400 true\n' | (cd "$src" && scripts/device-steps.sh --check - >/dev/null 2>&1)
rc=$?
check "--check refuses steps past the deadline" [ "$rc" = 2 ]
((fails == 0)) || { echo "$fails failed"; exit 1; }
