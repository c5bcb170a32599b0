"""torch.cuda of the fake torch (see torch/__init__.py)."""

import os

import torch

_initialized = False
_in_bad_fork = False


def _is_in_bad_fork():
    return _in_bad_fork


def is_initialized():
    return _initialized and not _is_in_bad_fork()


def _lazy_init():
    global _initialized
    if is_initialized():
        return
    if _is_in_bad_fork():
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
                           "you must use the 'spawn' start method")
    _initialized = True


def _forked_child():
    global _in_bad_fork
    if _initialized:
        _in_bad_fork = True


os.register_at_fork(after_in_child=_forked_child)


def synchronize(device=None):
    torch.calls.append(("synchronize",))


def empty_cache():
    torch.calls.append(("empty_cache",))


def manual_seed_all(seed):
    torch.calls.append(("cuda.manual_seed_all", seed))


# --- the caching allocator, as far as smolvm.torch uses it -------------------
# Each _fake_alloc(nbytes) is a segment of its own holding one live block, in
# the pool its thread is routed to: every thread's by _C._cuda_beginAllocateToPool,
# the calling thread's only by use_mem_pool (as torch routes them).

import contextlib  # noqa: E402
import threading  # noqa: E402

_segments = []  # memory_snapshot() entries
_next_address = [0x7F0000000000]
_pool_ids = [0]
_all_threads_pool = [None]
_thread_pool = threading.local()


class MemPool:
    def __init__(self):
        _pool_ids[0] += 1
        self.id = (1, _pool_ids[0])


@contextlib.contextmanager
def use_mem_pool(pool, device=None):
    torch.calls.append(("use_mem_pool", pool.id))
    _thread_pool.id = pool.id
    try:
        yield
    finally:
        _thread_pool.id = None


def _begin_all(device, pool_id):
    torch.calls.append(("_cuda_beginAllocateToPool", device, pool_id))
    _all_threads_pool[0] = pool_id


def _end_all(device, pool_id):
    torch.calls.append(("_cuda_endAllocateToPool", device, pool_id))
    _all_threads_pool[0] = None


def current_device():
    return 0


def _fake_alloc(nbytes):
    """A live allocation of nbytes in its own segment; returns its address."""
    pool = getattr(_thread_pool, "id", None) or _all_threads_pool[0] or (0, 0)
    address = _next_address[0]
    _next_address[0] += (nbytes + (2 << 20) - 1) // (2 << 20) * (2 << 20)
    _segments.append({"address": address, "total_size": nbytes, "segment_pool_id": pool,
                      "blocks": [{"address": address, "size": nbytes, "state": "active_allocated"}]})
    return address


def memory_snapshot():
    return [dict(s) for s in _segments]


def memory_stats():
    live = sum(s["total_size"] for s in _segments)
    return {"allocated_bytes.all.current": live, "reserved_bytes.all.current": live,
            "inactive_split_bytes.all.current": 0}
