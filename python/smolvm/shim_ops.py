"""The CUDA shims' op counters, read from inside the program they serve.

Through the shims, libcudart.so.13 exports smolvm_shim_op_counts and
smolvm_shim_op_name (docs/torch.md, "Round trips on the hot path"): per wire
op, how many the process sent as SYNC (each one round trip to its worker) and
how many it queued. Natively neither exists: read() answers None.

    from smolvm import shim_ops
    before = shim_ops.read()
    for _ in range(n):
        step()
    print(shim_ops.per_step(before, shim_ops.read(), n))

The counters are the whole process's (every thread), totals since its start.
Reading them takes the session's lock and sends nothing.
"""

import ctypes
import os

_SLOTS = 1024
_functions = None  # (counts, name), or () when the shims are not loaded


def _load():
    global _functions
    if _functions is not None:
        return _functions
    _functions = ()
    # The process's global scope first (the shims preloaded), then a
    # libcudart.so.13 already loaded by name (never loads one).
    for lib in (None, "libcudart.so.13"):
        try:
            handle = ctypes.CDLL(lib) if lib is None else ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            counts, name = handle.smolvm_shim_op_counts, handle.smolvm_shim_op_name
        except (OSError, AttributeError):
            continue
        counts.restype = ctypes.c_size_t
        counts.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        name.restype = ctypes.c_char_p
        name.argtypes = [ctypes.c_uint32]
        _functions = (counts, name)
        break
    return _functions


def available():
    """Whether this process runs through the shims (the counters exist)."""
    return bool(_load())


def read():
    """(round trips by wire op, queued ops by wire op) as two lists, or None natively."""
    f = _load()
    if not f:
        return None
    sync = (ctypes.c_uint64 * _SLOTS)()
    queued = (ctypes.c_uint64 * _SLOTS)()
    n = min(f[0](sync, queued, _SLOTS), _SLOTS)
    return list(sync[:n]), list(queued[:n])


def per_step(before, after, steps):
    """What each of `steps` steps between two read()s cost, or None natively:
    {"round_trips": per step, "queued": per step, "by_op": {op name: [round
    trips, queued] per step}}, the ops that cost most first."""
    if before is None or after is None or steps <= 0:
        return None
    f = _load()
    by_op = {}
    for op in range(min(len(before[0]), len(after[0]))):
        sync, queued = after[0][op] - before[0][op], after[1][op] - before[1][op]
        if sync or queued:
            by_op[f[1](op).decode()] = [round(sync / steps, 2), round(queued / steps, 2)]
    return {"round_trips": round(sum(v[0] for v in by_op.values()), 2),
            "queued": round(sum(v[1] for v in by_op.values()), 2),
            "by_op": dict(sorted(by_op.items(), key=lambda kv: (-kv[1][0], -kv[1][1])))}
