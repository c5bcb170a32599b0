#!/bin/sh
# Installs the smolvm package as the README says (a venv, pip with no index
# and no build isolation: setuptools from the system) from a copy of python/
# (the build writes build/ and *.egg-info beside the sources), then imports
# it from outside the tree. Usage: pip_install_test.sh PYTHON3 PYTHON_DIR GUEST_LIB
set -eu
py=$1 src=$2 lib=$3
if ! "$py" -c 'import setuptools, wheel, venv' 2>/dev/null || ! "$py" -m pip --version >/dev/null 2>&1; then
  echo "SKIP: $py lacks venv/pip/setuptools/wheel (scripts/setup.sh installs them)"
  exit 77
fi
tmp=$(mktemp -d /tmp/smolvm-pip-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cp -r "$src" "$tmp/src"
rm -rf "$tmp/src/tests"
"$py" -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --no-build-isolation --no-index "$tmp/src"
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
