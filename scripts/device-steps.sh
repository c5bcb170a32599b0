#!/usr/bin/env bash
# Runs several device scripts in one device call, each time-boxed, each
# step's files tarred into one file under $OUT (the device tool brings back
# at most 8 files: 7 steps and steps.txt).
#
# Usage: scripts/device-steps.sh [--check] PLAN  (PLAN a file, or - for stdin)
#   --check  reads the plan only: each step's scripts/... exist and the time
#            boxes add up to at most DEADLINE; runs nothing (exit 0 or 2)
# PLAN lines: NAME SECONDS COMMAND...           ('#' starts a comment line)
#   NAME     [A-Za-z0-9_-]+, unique; the step's files come back as NAME.tgz
#   SECONDS  the step's time box (timeout -k 10)
#   COMMAND  run by bash from the repo root with OUT set to the step's own
#            fresh folder; its stdout and stderr go to console.txt there
# A step that would end after DEADLINE (seconds from the start, default 570)
# is skipped and says so; the next ones still get their chance.
# steps.txt: one line per step: NAME, rc (124/137: time box ran out;
# "skipped"), seconds, the last line it printed.
#
# The build: a carried .carry/build.tgz is unpacked into .carry/build when
# that has no smolvm; else a carried .carry/lite (a build without its
# tests) is copied there. build/ then links to .carry/build (lib.sh).
# Exit status: 0 when every step ran and returned 0, 1 otherwise, 2 for a
# plan it cannot read.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/lib.sh
OUT=${OUT:-$ROOT/device-steps-out}
DEADLINE=${DEADLINE:-570}
check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
plan=${1:-}
[[ -n $plan ]] || { echo "device-steps: usage: scripts/device-steps.sh PLAN (a file, or -)" >&2; exit 2; }
if [[ $plan == - ]]; then
  lines=$(cat)
elif [[ -r $plan ]]; then
  lines=$(cat "$plan")
else
  echo "device-steps: cannot read the plan '$plan'" >&2
  exit 2
fi

names=() budgets=() commands=()
while IFS= read -r line; do
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  read -r name budget cmd <<<"$line"
  if [[ ! $name =~ ^[A-Za-z0-9_-]+$ || ! $budget =~ ^[0-9]+$ || -z ${cmd:-} ]]; then
    echo "device-steps: a plan line needs NAME SECONDS COMMAND: '$line'" >&2
    exit 2
  fi
  for n in "${names[@]}"; do
    [[ $n != "$name" ]] || { echo "device-steps: step '$name' named twice" >&2; exit 2; }
  done
  names+=("$name") budgets+=("$budget") commands+=("$cmd")
done <<<"$lines"
((${#names[@]})) || { echo "device-steps: the plan has no step" >&2; exit 2; }
((${#names[@]} <= 7)) || { echo "device-steps: at most 7 steps (8 files come back)" >&2; exit 2; }
if ((check)); then
  total=0
  for i in "${!names[@]}"; do
    total=$((total + budgets[i]))
    for word in ${commands[$i]}; do
      [[ $word == scripts/* && ! -e ${word%%[;)]*} ]] && { echo "device-steps: step ${names[$i]}: no $word" >&2; exit 2; }
    done
  done
  ((total <= DEADLINE)) || { echo "device-steps: the steps' ${total} s pass the ${DEADLINE} s deadline" >&2; exit 2; }
  echo "device-steps: ${#names[@]} steps, ${total} s of ${DEADLINE} s"
  exit 0
fi

if [[ ! -x .carry/build/smolvm ]]; then
  if [[ -f .carry/build.tgz ]]; then
    mkdir -p .carry/build && tar xzf .carry/build.tgz -C .carry/build
  elif [[ -d .carry/lite ]]; then
    mkdir -p .carry/build && cp -a .carry/lite/. .carry/build/
  fi
fi
find_build || echo "device-steps: no smolvm in $BUILD (steps that need it will fail)" >&2

mkdir -p "$OUT"
: >"$OUT/steps.txt"
make_workdir device-steps
failed=0
for i in "${!names[@]}"; do
  name=${names[$i]} budget=${budgets[$i]}
  if ((SECONDS + budget > DEADLINE)); then
    echo "$name skipped: its ${budget} s would end after the ${DEADLINE} s deadline (at ${SECONDS} s)" | tee -a "$OUT/steps.txt"
    failed=1
    continue
  fi
  mkdir -p "$W/$name"
  t0=$SECONDS
  log "step $name (${budget} s): ${commands[$i]}"
  OUT=$W/$name timeout -k 10 "$budget" bash -c "${commands[$i]}" >"$W/$name/console.txt" 2>&1
  rc=$?
  last=$(tail -n 1 "$W/$name/console.txt" | cut -c1-200)
  echo "$name rc=$rc $((SECONDS - t0)) s: $last" | tee -a "$OUT/steps.txt"
  ((rc == 0)) || failed=1
  tar czf "$OUT/$name.tgz" -C "$W" "$name"
done
exit "$failed"
