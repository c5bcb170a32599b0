#!/usr/bin/env bash
# Issue 17: one exit-code rule in code, --help and docs. Each command family's
# `--help` footer ("Exit codes: 0 ok, 1 ..., 2 ...") names the same codes as
# its section of the docs, and everywhere a command-line error is exit 2
# (CliTest.EveryCommandLineErrorExitsTwo checks the code itself).
# Usage: tests/exit_codes_test.sh SMOLVM   (from the repository root)
set -uo pipefail
smolvm=$1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# The codes a --help footer names: every number that starts a comma-separated item.
help_codes() {
  "$smolvm" "$@" --help | sed -n 's/^Exit codes: //p' | sed 's/([^)]*)//g' | tr ',' '\n' |
    sed -nE 's/^ *([0-9]+) .*/\1/p' | sort -n | tr '\n' ' '
}
# docs/machines.md's table between "## Exit codes" and the next heading: "| N | ... |".
table_codes() {
  sed -n "/^$1\$/,/^#/p" "$2" | sed -nE 's/^\| *([0-9]+) *\|.*/\1/p' | sort -n | tr '\n' ' '
}
# A prose section ("0 success; 1 ...; 2 ..."): every number that starts a clause.
prose_codes() {
  sed -n "/^$1\$/,/^#/p" "$2" | sed '1d;$d' | tr '\n' ' ' | sed 's/([^)]*)//g' | tr ';' '\n' |
    sed -nE 's/^ *([0-9]+) .*/\1/p; s/^.*[0-9a-z`] +([0-9]+) [a-z].*/\1/p' | sort -nu | tr '\n' ' '
}
check() {  # NAME HELP_CODES DOC_CODES
  [[ -n $2 && $2 == "$3" ]] || bad "$1: --help names codes '$2', the docs '$3'"
}
check "smolvm machine" "$(help_codes machine)" "$(table_codes '## Exit codes' docs/machines.md)"
check "smolvm pack" "$(help_codes pack)" "$(prose_codes '### Pack exit codes' docs/machines.md)"
check "smolvm bench" "$(help_codes bench)" "$(prose_codes '## Exit codes' docs/bench.md)"
# Command-line errors: exit 2 in every family's help and in the docs.
"$smolvm" --help | grep -q '^Exit codes: 0 ok, 2 command-line error (every command)' || bad "smolvm --help: no rule for command-line errors"
for f in machine cuda bench pack; do
  "$smolvm" $f --help | grep -qE '^Exit codes: .*, 2 invalid argument' || bad "smolvm $f --help: 2 is not 'invalid argument'"
done
grep -qE '^\| 2 \| invalid argument .*every command-line error' docs/machines.md || bad "docs/machines.md: 2 does not cover every command-line error"
grep -q '2 invalid argument, including every command-line error' docs/bench.md || bad "docs/bench.md: 2 does not cover every command-line error"
grep -q 'Every `smolvm` command exits 2 on a command-line error' README.md || bad "README.md: no rule for command-line errors"
((fail == 0)) && echo "exit codes: --help and docs agree"
exit $fail
