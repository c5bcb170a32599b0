#!/usr/bin/env bash
# Installs the Debian packages smolvm needs (idempotent), then configures and
# builds into build/. Usage: scripts/setup.sh [--no-install]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libzstd-dev libxxhash-dev libseccomp-dev libsqlite3-dev
  libssl-dev                          # libcrypto: SHA-256 (module cache, bench manifest)
  clang libclang-rt-14-dev            # libFuzzer's runtime is only a recommendation of clang
  gnuplot-nox python3-matplotlib     # bench plot
  python3-venv python3-pip python3-setuptools python3-wheel  # the smolvm Python package's install test
  erofs-utils squashfs-tools libssl-dev  # packs: mkfs.erofs (format 2), mksquashfs (format 1), libcrypto (SHA-256)
  runsc                               # gVisor: machine create --isolation gvisor (docs/machines.md, Isolation modes)
)

if [[ "${1:-}" != "--no-install" ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [[ $(id -u) == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

if [[ ! -x /usr/local/cuda/bin/nvcc && ! -f /usr/local/cuda/include/cuda.h ]]; then
  echo "setup: the CUDA 13 toolkit is expected at /usr/local/cuda (headers at least)" >&2
  exit 1
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built into build/ (CLI: build/smolvm)"
