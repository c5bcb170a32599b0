"""A stand-in for torch on machines without it (CI): records the calls
smolvm makes and lets a test put torch in the states the fork rules are
about. It is NOT torch: only the names smolvm touches exist.

  torch.set_num_threads(8)            # "num_threads=8"
  torch.ones(1).backward()            # "backward ran": starts a thread named
                                      # pt_autograd_0, as torch's engine does
  torch.cuda._lazy_init()             # CUDA initialized; a fork flags the child
                                      # as a bad fork, as torch does
  torch.calls                         # [("manual_seed", 7), ("empty_cache",), ...]
  torch.cuda._fake_alloc(nbytes)      # a live allocation, in the pool its
                                      # thread is routed to (MemPool, use_mem_pool,
                                      # _C._cuda_beginAllocateToPool)
"""

import ctypes
import threading

import types

from torch import cuda  # noqa: F401  (torch.cuda, as in torch)

# torch._C's allocator bindings that smolvm uses (a test may delete one).
_C = types.SimpleNamespace(
    _cuda_beginAllocateToPool=cuda._begin_all,
    _cuda_endAllocateToPool=cuda._end_all,
    _cuda_releasePool=lambda device, pool_id: calls.append(("_cuda_releasePool", device, pool_id)),
    _cuda_clearCublasWorkspaces=lambda: calls.append(("_cuda_clearCublasWorkspaces",)),
)

calls = []
_num_threads = 1
_autograd_started = threading.Event()


def get_num_threads():
    return _num_threads


def set_num_threads(n):
    global _num_threads
    calls.append(("set_num_threads", n))
    _num_threads = n


def manual_seed(seed):
    calls.append(("manual_seed", seed))
    if not cuda._is_in_bad_fork():
        cuda.manual_seed_all(seed)


def _autograd_thread():
    libc = ctypes.CDLL(None)
    libc.prctl(15, b"pt_autograd_0", 0, 0, 0)  # PR_SET_NAME, as c10::setThreadName
    _autograd_started.set()
    threading.Event().wait()


class Tensor:
    def backward(self):
        calls.append(("backward",))
        if not _autograd_started.is_set():
            threading.Thread(target=_autograd_thread, name="pt_autograd_0", daemon=True).start()
            _autograd_started.wait()


def ones(*shape):
    return Tensor()
