"""A Python golden for the machine test (src/machine/machine_python_test.cc):
starts worker threads and joins them (the fork rules: only the calling thread
at the fork), starts torch's CPU threads (the fake torch of fake_torch/, no
torch on CI) and is refused with the threads rule, pins them to 1, then waits
at smolvm.forkpoint(). Each clone proves that its threads, imports,
subprocesses, os.environ and torch's restored thread count work, then waits
(or exits with `exit` as argument)."""

import os
import queue
import random
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_torch"))
import torch  # noqa: E402  (the fake)

import smolvm  # noqa: E402

done = queue.Queue()
workers = [threading.Thread(target=lambda i=i: done.put(i * i), name="warm-%d" % i) for i in range(4)]
for w in workers:
    w.start()
for w in workers:
    w.join()
warm = sorted(done.get() for _ in workers)
torch.set_num_threads(4)
try:
    smolvm.forkpoint(seed=100)
except smolvm.ForkRuleError as e:
    print("golden refused rule=%s: %s" % (e.rule, e), flush=True)
torch.set_num_threads(1)  # pinned until the fork
seen = len(torch.calls)
print("golden ready warm=%s threads=%d" % (warm, threading.active_count()), flush=True)

idx = smolvm.forkpoint(seed=100)
if idx is None:
    print("golden released", flush=True)
    sys.exit(0)

# The clone's program: a fork (in C) of the child of os.fork().
got = queue.Queue()
ts = [threading.Thread(target=lambda i=i: got.put(idx + i)) for i in range(3)]
for t in ts:
    t.start()
for t in ts:
    t.join(10)
threads_ok = sorted(got.get_nowait() for _ in ts) == [idx, idx + 1, idx + 2]

from concurrent.futures import ThreadPoolExecutor  # noqa: E402  (an import the golden never made)

with ThreadPoolExecutor(4) as ex:
    pool_ok = list(ex.map(lambda x: x * x, range(8))) == [x * x for x in range(8)]
import decimal  # noqa: E402,F401

sub = subprocess.run(["sh", "-c", "echo $SMOLVM_FORK_NAME"], capture_output=True, text=True).stdout.strip()
seed_ok = random.random() == random.Random(100 + idx).random()
cpus = len(os.sched_getaffinity(0))
torch_ok = torch.calls[seen:] == [("manual_seed", 100 + idx), ("cuda.manual_seed_all", 100 + idx),
                                  ("set_num_threads", cpus)] and torch.get_num_threads() == cpus
timing = smolvm.fork_timing()
timing_ok = sorted(timing) == ["become_clone_ms", "child_ms", "os_fork_ms", "parked_ms", "prepare_ms",
                               "warmup_ms"] and all(0 <= v < 60000 for v in timing.values())
print("clone idx=%d env_index=%s env_name=%s host=%s socket=%s threads=%s pool=%s sub=%s seed=%s warm=%s "
      "torch_threads=%s timing=%s" % (
          idx, os.environ.get("SMOLVM_FORK_INDEX"), os.environ.get("SMOLVM_FORK_NAME"), os.environ.get("HOSTNAME"),
          os.environ.get("SMOLVM_FORKPOINT_SOCKET", "unset"), threads_ok, pool_ok, sub, seed_ok, warm,
          torch_ok or torch.calls[seen:], timing_ok or timing), flush=True)
if sys.argv[1:] == ["exit"]:
    sys.exit(0)
signal.pause()
