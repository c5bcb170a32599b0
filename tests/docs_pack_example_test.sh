#!/usr/bin/env bash
# Issue 30: docs/machines.md's pack example ("## Packs", its first sh block)
# runs as written, in a fresh directory with the built smolvm and
# smolvm-learner first on PATH and a private $SMOLVM_HOME, and the program it
# packs prints what the doc says. Needs root and mkfs.erofs (exit 77: skipped).
# Usage: docs_pack_example_test.sh BUILD_DIR   (run from the source tree)
set -uo pipefail
build=$(cd "$1" && pwd)
doc=docs/machines.md
if [[ $(id -u) != 0 ]]; then echo "machines need root (CI runs this as root)"; exit 77; fi
if ! command -v mkfs.erofs >/dev/null; then echo "no mkfs.erofs (erofs-utils; scripts/setup.sh installs it)"; exit 77; fi
example=$(awk '/^## Packs/ { in_packs = 1 } in_packs && /^```sh$/ { on = 1; next } on && /^```$/ { exit } on' "$doc")
[[ -n $example ]] || { echo "FAIL: no sh block under '## Packs' in $doc"; exit 1; }
work=$(mktemp -d /tmp/smolvm-docpack-XXXXXX)
export SMOLVM_HOME=$work/home
cleanup() {
  "$build/smolvm" machine rm --name a --force >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
out=$(cd "$work" && PATH="$build:$PATH" bash -euo pipefail -c "$example" 2>&1); rc=$?
fail=0
if ((rc != 0)); then echo "FAIL: the example exited $rc:"; echo "$out" | tail -15; fail=1; fi
if ! grep -q '^hello from /model$' <<<"$out"; then echo "FAIL: the packed program did not print 'hello from /model':"; echo "$out" | tail -15; fail=1; fi
if [[ -n $("$build/smolvm" machine list --json | tr -d '[]\n ') ]]; then echo "FAIL: the example left a machine"; fail=1; fi
((fail == 0)) && echo "pack example of $doc: PASS"
exit $fail
