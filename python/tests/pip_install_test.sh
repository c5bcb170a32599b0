#!/bin/sh
# Installs the smolvm package as python/README.md says, in a plain venv (no
# system site packages: only pip, no setuptools or wheel needed) and offline,
# from the source tree itself; imports it from outside the tree; then checks
# that the install left nothing in python/ (no build/, no *.egg-info) and that
# the other documented command works too.
# Usage: pip_install_test.sh PYTHON3 PYTHON_DIR GUEST_LIB
set -eu
py=$1 src=$2 lib=$3
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "SKIP: $py lacks venv/ensurepip (scripts/setup.sh installs python3-venv)"
  exit 77
fi
tmp=$(mktemp -d /tmp/smolvm-pip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
before=$(cd "$src" && find . -path ./tests -prune -o -name __pycache__ -prune -o -print | sort)
"$py" -m venv "$tmp/venv"
PIP_NO_INDEX=1 "$tmp/venv/bin/pip" install --quiet "$src"
cd "$tmp"
got=$(SMOLVM_GUEST_LIB="$lib" "$tmp/venv/bin/python" -c '
import smolvm, smolvm.torch
from smolvm import _guest
_guest.load()
print(smolvm.__file__)')
case "$got" in
  "$tmp/venv/"*) echo "installed: $got" ;;
  *) echo "smolvm imported from $got, not from the venv" >&2; exit 1 ;;
esac
"$tmp/venv/bin/pip" show smolvm >"$tmp/show"
grep -q "^Version: " "$tmp/show" || { echo "pip show smolvm: no version" >&2; exit 1; }
"$py" -m venv "$tmp/venv2"
"$tmp/venv2/bin/pip" install --quiet --no-build-isolation --no-index "$src"
"$tmp/venv2/bin/python" -c 'import smolvm' || { echo "--no-build-isolation --no-index install failed" >&2; exit 1; }
after=$(cd "$src" && find . -path ./tests -prune -o -name __pycache__ -prune -o -print | sort)
if [ "$before" != "$after" ]; then
  echo "the install left files in $src:" >&2
  printf '%s\n' "$after" | grep -vxF "$before" >&2 || true
  exit 1
fi
echo "pip install test: PASS"
