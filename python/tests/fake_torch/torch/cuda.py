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
