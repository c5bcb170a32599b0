"""A Python golden whose clones warm up before they park
(src/machine/machine_warmup_test.cc), without torch:
smolvm.forkpoint(seed=100, warmup=...).

    python3 machine_warm_clone.py OUT [cuda]

Each clone's warm-up writes OUT/warm-<idx> (a JSON record), draws from
random (forkpoint seeds again after it) and sleeps 0.3 s; with `cuda` (a
--cuda machine: the cudart shim through ctypes, the daemon on the fake
backend) it also uploads and reads back a buffer through its re-attached
session, before it parks. OUT/fail-<idx> makes clone idx's warm-up raise,
OUT/slow-<idx> makes it sleep 60 s. Once leased, each clone writes
OUT/ran-<idx> and completes {"idx", "seeds_again", "warm", "cuda"}.
"""

import ctypes
import json
import os
import random
import sys
import time

import smolvm

out = sys.argv[1]
cuda = len(sys.argv) > 2 and sys.argv[2] == "cuda"
N = 1 << 20
rt = None
if cuda:
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    base = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(base), N) == 0  # the golden's CUDA state: forked with it


def round_trip(fill):
    """A fresh device buffer written and read back: True when it holds what was written."""
    buf = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(buf), N) != 0:
        return False
    src = ctypes.create_string_buffer(bytes([fill]) * N, N)
    dst = ctypes.create_string_buffer(N)
    ok = rt.cudaMemcpy(buf, src, N, 1) == 0 and rt.cudaMemcpy(dst, buf, N, 2) == 0 and dst.raw == src.raw
    rt.cudaFree(buf)
    return ok


def warm_up():
    idx = int(os.environ["SMOLVM_FORK_INDEX"])
    if os.path.exists(os.path.join(out, "fail-%d" % idx)):
        raise ValueError("warm-up of clone %d failed on purpose" % idx)
    if os.path.exists(os.path.join(out, "slow-%d" % idx)):
        time.sleep(60)
    random.random()  # a warm-up may draw: the clone's program starts from its seed all the same
    record = {"idx": idx, "at": time.time(), "cuda": round_trip(idx + 1) if cuda else None}
    time.sleep(0.3)
    with open(os.path.join(out, "warm-%d" % idx), "w") as f:
        json.dump(record, f)


print("golden ready", flush=True)
idx = smolvm.forkpoint(seed=100, warmup=warm_up)
if idx is None:
    sys.exit(0)
seeds_again = random.random() == random.Random(100 + idx).random()
open(os.path.join(out, "ran-%d" % idx), "w").close()
with open(os.path.join(out, "warm-%d" % idx)) as f:
    warm = json.load(f)
p = smolvm.lease_payload()
smolvm.complete({"idx": idx, "seeds_again": seeds_again, "warm": warm, "payload": p,
                 "cuda": round_trip(0x5a) if cuda else None,
                 "timing": {k: round(v, 1) for k, v in smolvm.fork_timing().items()}})
