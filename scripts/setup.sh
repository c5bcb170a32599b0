#!/usr/bin/env bash
# Installs the Debian packages smolvm needs (idempotent), then configures and
# builds into build/: everything, or with --main only what the quickstart's
# main job runs (the CLI, the learner, the guest library and Python package,
# and on a GPU host the shims); scripts/test.sh builds the rest.
# Usage: scripts/setup.sh [--no-install] [--main]
set -euo pipefail
cd "$(dirname "$0")/.."
install=1 main=0
for arg in "$@"; do
  case "$arg" in
    --no-install) install=0 ;;
    --main) main=1 ;;
    *) echo "setup: unknown argument '$arg' (usage: scripts/setup.sh [--no-install] [--main])" >&2; exit 2 ;;
  esac
done

packages=(
  cmake ninja-build g++ pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libzstd-dev libxxhash-dev libseccomp-dev libsqlite3-dev
  libssl-dev                          # libcrypto: SHA-256 (module cache, bench manifest)
  libboost-dev                        # serve: Boost.Beast (header-only HTTP)
  openssl                             # serve's TLS test makes its certificate (python/tests/serve_client_test.py)
  clang libclang-rt-14-dev            # libFuzzer's runtime is only a recommendation of clang
  gnuplot-nox python3-matplotlib     # bench plot
  python3-venv python3-pip python3-setuptools python3-wheel  # the smolvm Python package's install test
  erofs-utils squashfs-tools libssl-dev  # packs: mkfs.erofs (format 2), mksquashfs (format 1), libcrypto (SHA-256)
  runsc                               # gVisor: machine create --isolation gvisor (docs/machines.md, Isolation modes)
)

if ((install)); then
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
targets=()
if ((main)); then
  targets=(smolvm smolvm-learner smolvm_guest smolvm_python)
  # The fork arm's --cuda machines load the shims.
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    targets+=(cudart_shim library_shims shim_proto_hash)
  fi
fi
t0=$SECONDS
cmake --build build -j"$(nproc)" ${targets[@]:+--target "${targets[@]}"}
took=$((SECONDS - t0))
what="everything"
((main)) && what="the main job's targets (${targets[*]}; scripts/test.sh builds the rest)"
printf 'setup: built %s into build/ in %dm%02ds on %d cores (CLI: build/smolvm)\n' "$what" $((took / 60)) $((took % 60)) "$(nproc)"
