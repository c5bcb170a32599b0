"""What forkpoint() does in each clone, first thing after the fork."""

import os
import random
import sys
import traceback

from smolvm import _guest


def clear_bad_fork(torch):
    """Lets the clone use CUDA: torch marked this child a bad fork of CUDA.

    torch has no public call for it: torch.cuda._is_in_bad_fork (read by
    torch.cuda.is_initialized and _lazy_init) is replaced by one that says
    False. The clone's CUDA session is its own (the shim re-attached it), so
    re-using torch's CUDA state is right here, unlike after a plain fork.
    Verified on the H200 only once torch runs through the shims (issue 13)."""
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and hasattr(cuda, "_is_in_bad_fork"):
        cuda._is_in_bad_fork = lambda: False


def sync_environ():
    """os.environ is Python's copy of the environment taken at start-up; the
    guest library changed the C one (SMOLVM_FORK_INDEX, SMOLVM_FORK_NAME,
    HOSTNAME set; SMOLVM_FORKPOINT_SOCKET unset). Brings the copy in line."""
    c_env = _guest.c_environ()
    for key in [k for k in os.environ if k not in c_env]:
        del os.environ[key]
    for key, value in c_env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def clone_seed(seed, index):
    """The seed of clone `index`: seed + index, or fresh entropy when seed is None."""
    if seed is None:
        return int.from_bytes(os.urandom(8), "little") >> 1
    return seed + index


def reseed(seed, torch):
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % (1 << 32))
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(seed)  # CUDA generators too (queued until CUDA is initialized)


def restore_threads(threads, torch):
    if torch is None or not hasattr(torch, "set_num_threads"):
        return
    if threads is None:
        threads = len(os.sched_getaffinity(0))  # the clone machine's CPUs
    torch.set_num_threads(max(1, int(threads)))


def become_clone(index, seed, threads, torch):
    """In clone `index`: bad-fork flag, os.environ, seeds, threads (that order:
    torch.manual_seed reads the bad-fork flag)."""
    if torch is not None:
        clear_bad_fork(torch)
    sync_environ()
    reseed(clone_seed(seed, index), torch)
    restore_threads(threads, torch)


def warm_up(fn, index, seed, torch):
    """Runs forkpoint's warmup function in clone `index` before it parks; the
    seeds again after it, so the clone's program starts as without it. One
    that raises ends the clone: its traceback in the clone's log, exit 1 (a
    parked fork then fails naming the clone)."""
    try:
        fn()
    except BaseException as e:  # noqa: B902 -- SystemExit included: the clone must not run on half warm
        print("smolvm.forkpoint: clone %d: the warm-up raised; the clone ends" % index, file=sys.stderr)
        traceback.print_exc()
        # Last, in one line: what a parked fork's failure quotes of the log's end.
        print("smolvm.forkpoint: clone %d: warm-up failed: %s" % (index, _where(e)), file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    reseed(clone_seed(seed, index), torch)


def _where(e, frames=3):
    """`Type: first line of the message [in f (file:line) <- ...]`: the innermost frames, short."""
    msg = (str(e).strip().splitlines() or [""])[0][:160]
    tb = traceback.extract_tb(e.__traceback__)[-frames:]
    at = " <- ".join("%s (%s:%d)" % (f.name, os.path.basename(f.filename), f.lineno) for f in reversed(tb))
    return "%s: %s%s" % (type(e).__name__, msg, " in " + at if at else "")

