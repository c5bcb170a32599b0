"""A Python golden with CUDA state, for the --cuda machine test
(src/machine/machine_python_test.cc) and the daemon-controlled fork test
(python/tests/test_daemon_fork.py): calls the cudart shim through ctypes (no
torch on CI; the daemon runs the fake backend), marks one allocation frozen,
and waits at smolvm.forkpoint(). Each clone reads the frozen buffer and writes
its private one through its own re-attached session, then waits (or exits,
with `exit` as argument)."""

import ctypes
import os
import signal
import sys

import smolvm

N = 2 << 20
H2D, D2H = 1, 2
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def check(r, what):
    if r != 0:
        print("FAIL %s: cudaError %d" % (what, r), flush=True)
        sys.exit(1)


frozen, private = ctypes.c_void_p(), ctypes.c_void_p()
check(rt.cudaMalloc(ctypes.byref(frozen), N), "cudaMalloc")
check(rt.cudaMalloc(ctypes.byref(private), N), "cudaMalloc")
pattern = ctypes.create_string_buffer((bytes(range(1, 252)) * (N // 251 + 1))[:N], N)
check(rt.cudaMemcpy(frozen, pattern, N, H2D), "upload")
check(rt.cudaMemcpy(private, pattern, N, H2D), "upload")
check(rt.cudaDeviceSynchronize(), "synchronize")
smolvm.mark_frozen(frozen.value, N)
print("golden ready", flush=True)

idx = smolvm.forkpoint()
if idx is None:
    print("golden released", flush=True)
    sys.exit(0)
out = ctypes.create_string_buffer(N)
check(rt.cudaMemcpy(out, frozen, N, D2H), "read frozen")
frozen_ok = out.raw == pattern.raw
mine = ctypes.create_string_buffer(bytes([idx + 1]) * N, N)
check(rt.cudaMemcpy(private, mine, N, H2D), "write private")
check(rt.cudaMemcpy(out, private, N, D2H), "read private")
print("clone idx=%d frozen=%s private=%s env_index=%s" % (
    idx, frozen_ok, out.raw == mine.raw, os.environ.get("SMOLVM_FORK_INDEX")), flush=True)
if sys.argv[1:] == ["exit"]:
    sys.exit(0)
signal.pause()
