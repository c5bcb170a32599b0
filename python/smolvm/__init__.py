"""smolvm: fork a Python (PyTorch) golden into clones that share its GPU state.

    import smolvm
    idx = smolvm.forkpoint()     # the golden blocks here
    if idx is None:              # the golden, released (machine stopped)
        raise SystemExit(0)
    # clone number idx from here on

forkpoint() applies the fork rules (docs/torch-fork.md): it refuses a golden
that broke one (ForkRuleError names it), empties torch's cache of free CUDA
blocks, forks through os.fork() so CPython's after-fork work runs, and in
each clone clears torch's bad-fork flag, refreshes os.environ, reseeds
random/numpy/torch and gives torch its CPU threads back.

A leased clone (smolvm serve, or 'smolvm machine lease-send') takes its work
and answers on its lease link:

    idx = smolvm.forkpoint()          # a parked clone returns once leased
    episode = smolvm.lease_payload()  # the lease's payload, a dict
    while episode is not None:
        smolvm.reply(train(episode))  # answers this payload
        episode = smolvm.next_payload()  # None once the host ended the lease
    smolvm.complete({"adapter": path})   # or exit: either ends the lease
"""

import errno as _errno
import os as _os
import sys as _sys
import time as _time

from smolvm import _clone, _guest, _lease, _rules
from smolvm._lease import LeaseError
from smolvm._rules import ForkRuleError
from smolvm.client import Client, Lease, LeaseFailed, Pool, ServeError

__all__ = ["forkpoint", "native_forkpoint", "fork_timing", "mark_frozen", "lease_payload", "next_payload", "reply",
           "complete", "ForkError", "ForkRuleError", "LeaseError", "Client", "Pool", "Lease", "ServeError", "LeaseFailed"]

_timing = {}


class ForkError(OSError):
    """The fork controller refused or went away (errno in .errno)."""


_WHY = {
    _errno.ENOTSUP: "no fork controller: start the machine with 'smolvm machine start --forkable', or run "
                    "under the smolvm CUDA shim for 'smolvm cuda fork --pid'",
    _errno.EBUSY: "another process of this machine already waits at the forkpoint",
    _errno.EPERM: "the fork controller refused (a clone cannot be a golden)",
}


def _error(err, what):
    return ForkError(err, "smolvm.forkpoint: %s: %s" % (what, _WHY.get(err, _os.strerror(err))))


def _empty_torch_cache(torch):
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None and cuda.is_initialized():
        cuda.synchronize()
        # cuBLAS/cuBLASLt workspaces are live allocator blocks (one per
        # handle and stream, 32 MiB on Hopper) that empty_cache keeps; torch
        # gives a handle its workspace again at its next GEMM, in the clone.
        clear = getattr(getattr(torch, "_C", None), "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        cuda.empty_cache()  # free cached blocks: clones would copy them


def _report_memory(torch, memory_report):
    """With memory_report (default: SMOLVM_FORK_MEMORY_REPORT=1), prints to
    stderr what the clones will copy (smolvm.torch.describe_memory)."""
    if memory_report is None:
        memory_report = _os.environ.get("SMOLVM_FORK_MEMORY_REPORT") == "1"
    if not memory_report or torch is None:
        return
    import smolvm.torch as smtorch

    for line in smtorch.memory_report():
        print("smolvm.forkpoint: memory: " + line, file=_sys.stderr, flush=True)


def forkpoint(*, seed=None, threads=None, memory_report=None, warmup=None):
    """Waits at the forkpoint. In the golden: returns None once released
    (machine stopped, 'smolvm cuda release'). In each clone: returns its
    index (0, 1, 2, ...); in a parked clone ('machine fork --park', serve's
    pools) only once it is leased (its first payload came: lease_payload()).

    seed:    clone i seeds random, numpy and torch with seed + i (default:
             fresh entropy per clone).
    threads: torch's CPU threads in each clone (default: the clone's CPUs).
    memory_report: print torch's memory by pool and the live blocks outside
             the frozen pools to stderr before waiting (default: when
             SMOLVM_FORK_MEMORY_REPORT=1).
    warmup:  a function (no arguments) each clone calls before it parks,
             its CUDA session attached: what the clone's first step would do
             the first time (kernels the golden never ran, library handles,
             allocator growth) done ahead of its lease. A parked fork (a
             pool's refill) returns once every clone's warm-up is done, so a
             pool's ready clones are warm. The function must leave the clone
             as it found it (e.g. one training step, then the adapters and
             the optimizer put back); the seeds are set again after it. A
             warm-up that raises ends the clone (exit status 1, the
             traceback in its log), and the fork fails naming it. In the
             golden it is never called.

    Raises ForkRuleError before waiting when the golden broke a fork rule,
    ForkError when the controller refuses or goes away.
    REQUIRES: no other thread of the process makes CUDA calls until it returns."""
    torch = _sys.modules.get("torch")
    _rules.check(torch)
    _empty_torch_cache(torch)
    _report_memory(torch, memory_report)
    lib = _guest.load()
    order = _guest.Order()
    while True:
        r = lib.smolvm_fork_wait(order)
        if r == -_errno.ECANCELED:
            return None
        if r < 0:
            raise _error(-r, "waiting for a fork order")
        # From the order to the fork the CUDA shim holds its session: only the
        # steps run here, and every path ends in smolvm_fork_parent/_child.
        t_order = _time.monotonic()
        try:
            r = lib.smolvm_fork_prepare(order)
            t_fork = _time.monotonic()
            pid = _os.fork() if r == 0 else r
        except OSError as e:
            pid = -(e.errno or _errno.EIO)
        except BaseException:
            lib.smolvm_fork_parent(order, -_errno.EINTR)
            raise
        if pid == 0:
            t_child = _time.monotonic()
            index = lib.smolvm_fork_child_attach(order)  # returns in the clone's program
            if index < 0:
                _os._exit(70)
            t_attached = _time.monotonic()
            _clone.become_clone(index, seed, threads, torch)
            t_became = _time.monotonic()
            if warmup is not None:
                _clone.warm_up(warmup, index, seed, torch)
            t_warm = _time.monotonic()
            lib.smolvm_fork_child_park()  # parked: returns once leased (or at once, not parked)
            _timing.update(prepare_ms=(t_fork - t_order) * 1e3, os_fork_ms=(t_child - t_fork) * 1e3,
                           child_ms=(t_attached - t_child) * 1e3, become_clone_ms=(t_became - t_attached) * 1e3,
                           warmup_ms=(t_warm - t_became) * 1e3, parked_ms=(_time.monotonic() - t_warm) * 1e3)
            return index
        r = lib.smolvm_fork_parent(order, pid)
        if r < 0:
            raise _error(-r, "reporting a fork to the controller")


def native_forkpoint(index=0, *, seed=None, threads=None, warmup=None):
    """forkpoint()'s work without a fork, for a native reference run of a
    forked program: the golden's steps before it waits (the fork rules
    checked; torch's cuBLAS workspaces and cache of free CUDA blocks emptied)
    and clone `index`'s after the fork (random, numpy and torch seeded with
    seed + index, torch's CPU threads, the warm-up and the seeds again), in
    this process. A program that calls it where its golden calls forkpoint()
    does the same work before its first step as its clone `index` (the rule:
    forked learners train bit-identically to native). Returns index; a
    warm-up that raises raises here."""
    torch = _sys.modules.get("torch")
    _rules.check(torch)
    _empty_torch_cache(torch)
    s = _clone.clone_seed(seed, index)
    _clone.reseed(s, torch)
    _clone.restore_threads(threads, torch)
    if warmup is not None:
        warmup()
        _clone.reseed(s, torch)
    return index


def fork_timing():
    """In a clone: where its fork's time went on this side, in ms (monotonic
    clock, continuous across the fork): prepare_ms (the order to os.fork:
    the CUDA shim's wait for the daemon's order), os_fork_ms (os.fork() with
    the at-fork handlers, as the child sees it), child_ms (the child chain
    into the clone machine and the CUDA session's re-attach), become_clone_ms
    (bad-fork flag, os.environ, seeds, threads), warmup_ms (forkpoint's
    warmup function; 0 without), parked_ms (parked until leased). Empty in
    a golden."""
    return dict(_timing)


def mark_frozen(address, nbytes):
    """Marks device memory [address, address + nbytes) frozen: shared read-only
    with the clones under '--share on' (smolvmMarkFrozen). Raises OSError when
    it is not device memory, or without the smolvm CUDA shim (a --cuda machine).
    torch users: smolvm.torch.frozen() marks a model's weights."""
    import ctypes

    r = _guest.load().smolvmMarkFrozen(ctypes.c_void_p(address), nbytes)
    if r < 0:
        raise OSError(-r, "smolvmMarkFrozen(0x%x, %d): %s%s" % (
            address, nbytes, _os.strerror(-r),
            " (needs the smolvm CUDA shim: a --cuda machine)" if -r == _errno.ENOTSUP else ""))


def lease_payload():
    """In a leased clone: the lease's payload (a dict), waiting until it comes.
    The same dict each call. None when the lease ended before any payload.
    Raises LeaseError without a lease link (not a clone, or a golden)."""
    return _lease.take(first=True)


def next_payload():
    """In a leased clone: the next payload not yet returned (by this or
    lease_payload), waiting until it comes; None once the lease ended (the
    host ended it, or complete() was called). The first call returns the
    lease's payload unless lease_payload() did."""
    return _lease.take(first=False)


def reply(result):
    """Answers the payload last returned with `result` (JSON-serializable,
    at most 1 MiB as JSON; no NaN). Any number of replies per payload.
    Raises LeaseError once the lease is over."""
    _lease.send(result, is_complete=False)


def complete(result):
    """Ends the lease with `result` (JSON-serializable, at most 1 MiB as JSON).
    The program may go on or exit; its exit also ends a lease not completed."""
    _lease.send(result, is_complete=True)
