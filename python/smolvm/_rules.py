"""The fork rules of a torch golden, checked before it waits at the forkpoint.

fork() keeps only the calling thread, and torch reacts (measured, torch 2.11):
  1. after any backward() every backward in a child raises ("Unable to handle
     autograd's threading in combination with fork-based multiprocessing");
  2. an OpenMP pool of more than one thread in the parent hangs the child at
     its first parallel op;
  3. a fork made from C skips CPython's after-fork work (libsmolvm-guest's
     smolvmForkpoint() refuses to run in Python; forkpoint() uses os.fork());
  4. torch flags the child as a bad fork of CUDA (cleared in the clone).
Rules 1 and 2 are the user's to keep; ForkRuleError names the one broken.
"""

import os
import threading
import warnings


class ForkRuleError(RuntimeError):
    """A fork rule the golden broke; `rule` is "backward" or "threads"."""

    def __init__(self, rule, message):
        super().__init__(message)
        self.rule = rule


def _thread_names():
    names = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return names
    for tid in tids:
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                names.append(f.read().strip())
        except OSError:
            pass  # the thread ended
    return names


def autograd_threads():
    """Names of torch's autograd device threads: they exist once a backward ran."""
    return sorted(n for n in _thread_names() if n.startswith("pt_autograd_"))


def check(torch):
    """Raises ForkRuleError for the first broken rule. `torch`: the imported module or None."""
    ran = autograd_threads()
    if ran:
        raise ForkRuleError(
            "backward",
            "forkpoint after backward(): fork before the first backward (torch's autograd threads %s run in "
            "this process; a clone's backward() would fail)" % ", ".join(ran))
    if torch is not None and hasattr(torch, "get_num_threads"):
        n = torch.get_num_threads()
        if n != 1:
            raise ForkRuleError(
                "threads",
                "forkpoint with torch's CPU threads at %d: call torch.set_num_threads(1) before the first torch "
                "operation (a parent's OpenMP pool hangs the clones); each clone gets its thread count back "
                "from smolvm.forkpoint(threads=...)" % n)
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        warnings.warn("forkpoint with other Python threads running (%s): they do not exist in the clones; "
                      "join them before the forkpoint" % ", ".join(others), RuntimeWarning, stacklevel=3)
