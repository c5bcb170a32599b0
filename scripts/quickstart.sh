#!/usr/bin/env bash
# The main job, for now: set everything up, then show the fork pool working.
# A CUDA program built with nvcc runs unmodified through the shim against the
# daemon, and a golden with frozen weights forks clones that share them.
# Uses the GPU when `nvidia-smi` sees one, else the fake backend (no GPU).
# (The native-vs-fork learner benchmark lands here with the bench issue.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

backend=fake
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then backend=cuda; fi
echo "quickstart: backend $backend$([[ $backend == fake ]] && echo ' (no GPU found: host-memory emulation)')"

work=$(mktemp -d /tmp/smolvm-quickstart.XXXXXX)
sock=$work/cuda.sock
build/smolvm _cuda-daemon "$sock" --backend "$backend" --pool 2 2>"$work/daemon.log" &
daemon=$!
cleanup() { kill -TERM "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 100); do [[ -S $sock.admin ]] && break; sleep 0.05; done
export SMOLVM_CUDA_SOCKET=$sock
shim_env=(env LD_LIBRARY_PATH="$PWD/build/shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")

echo "quickstart: 1. an unmodified CUDA program through the shim"
"${shim_env[@]}" build/tests/shim/bin/prog_kernels | tail -1

echo "quickstart: 2. a golden with 96 MiB frozen forks 3 clones (--share on)"
mkdir -p "$work/fork"
"${shim_env[@]}" build/tests/shim/bin/prog_fork "$work/fork" 96 4 &
golden=$!
build/smolvm cuda fork --pid "$golden" --count 3 --share on --wait 30
for _ in $(seq 300); do [[ $(ls "$work"/fork/clone*.txt 2>/dev/null | wc -l) -ge 3 ]] && break; sleep 0.1; done
cat "$work"/fork/clone*.txt
build/smolvm cuda status
build/smolvm cuda release --pid "$golden"
wait "$golden"
cat "$work/fork/golden.txt"
echo "quickstart: done (daemon log: fork lines below)"
grep "fork: clone" "$work/daemon.log" || true
