"""smolvm.forkpoint() without a machine and without torch: the fork rules
(simulated with the fake torch in fake_torch/, only where real torch cannot
run here), the golden's os.fork() against a scripted controller, and what a
clone does after the fork. The fork into real clone machines is tested in
src/machine/machine_python_test.cc.

Run: PYTHONPATH=python:python/tests/fake_torch SMOLVM_GUEST_LIB=build/shim/libsmolvm-guest.so \
     python3 -m unittest discover -s python/tests
"""

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

import smolvm
import smolvm.torch
from smolvm import _guest


_marker = None  # where a child notes that CPython's after-fork work ran in it


def _note_child():
    if _marker is not None:
        with open(_marker, "a") as f:
            f.write("%d\n" % os.getpid())


os.register_at_fork(after_in_child=_note_child)


def run(script):
    """Runs `script` in a fresh interpreter (the fake torch's state is per process)."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, SMOLVM_FORKPOINT_SOCKET=""))
    return p.returncode, p.stdout, p.stderr


class ForkRulesTest(unittest.TestCase):
    def test_forkpoint_after_backward_names_the_rule(self):
        rc, out, err = run("""
            import torch, smolvm
            torch.ones(1).backward()
            try:
                smolvm.forkpoint()
            except smolvm.ForkRuleError as e:
                print(e.rule, "|", e)
        """)
        self.assertEqual(rc, 0, err)
        self.assertIn("backward | forkpoint after backward(): fork before the first backward", out)
        self.assertIn("pt_autograd_0", out)

    def test_forkpoint_with_torch_threads_names_the_rule(self):
        rc, out, err = run("""
            import torch, smolvm
            torch.set_num_threads(8)
            try:
                smolvm.forkpoint()
            except smolvm.ForkRuleError as e:
                print(e.rule, "|", e)
        """)
        self.assertEqual(rc, 0, err)
        self.assertIn("threads | forkpoint with torch's CPU threads at 8: call torch.set_num_threads(1)", out)

    def test_c_forkpoint_refuses_a_python_process(self):
        rc, out, err = run("""
            from smolvm import _guest
            print(_guest.load().smolvmForkpoint())
        """)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.strip(), str(-__import__("errno").EPERM))
        self.assertIn("fork through os.fork(): use smolvm.forkpoint()", err)

    def test_rules_hold_then_cache_emptied_before_waiting(self):
        rc, out, err = run("""
            import torch, smolvm
            torch.cuda._lazy_init()
            try:
                smolvm.forkpoint()
            except smolvm.ForkError as e:
                print(e.errno, "|", e)
            print(torch.calls)
        """)
        self.assertEqual(rc, 0, err)
        self.assertIn("%d | " % __import__("errno").ENOTSUP, out)
        self.assertIn("--forkable", out)
        self.assertIn("[('synchronize',), ('_cuda_clearCublasWorkspaces',), ('empty_cache',)]", out)

    def test_memory_report_before_waiting(self):
        rc, out, err = run("""
            import torch, smolvm, smolvm.torch
            torch.cuda._lazy_init()
            smolvm.mark_frozen = lambda address, size: None
            with smolvm.torch.frozen():
                torch.cuda._fake_alloc(64 << 20)
            torch.cuda._fake_alloc(3 << 20)
            torch.cuda._fake_alloc(3 << 20)
            try:
                smolvm.forkpoint(memory_report=True)
            except smolvm.ForkError:
                pass
        """)
        self.assertEqual(rc, 0, err)
        self.assertIn("smolvm.forkpoint: memory: torch: allocated 70.0 MiB, reserved 70.0 MiB", err)
        self.assertIn("smolvm.forkpoint: memory: pool (1, 1) (frozen): 1 segments, reserved 64.0 MiB, live 64.0 MiB",
                      err)
        self.assertIn("smolvm.forkpoint: memory: live outside frozen pools: 2 blocks, 6.0 MiB; largest: 2 x 3.0 MiB",
                      err)


class ScriptedController:
    """The supervisor's side of the forkpoint wire, one fork: FORK, the
    child's CLONE refused, FORKED read, RELEASE."""

    def __init__(self, path):
        self.lines = []
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(path)
        self.ls.listen(4)
        self.thread = threading.Thread(target=self._serve, name="scripted-controller")
        self.thread.start()

    def _serve(self):
        g, _ = self.ls.accept()
        self.lines.append(g.recv(64).decode())
        g.sendall(b"FORK 1 kid-1 on -\n")
        c, _ = self.ls.accept()
        self.lines.append(c.recv(64).decode())
        c.sendall(b"ERR 5 scripted\n")
        c.close()
        self.lines.append(g.recv(64).decode())
        g.sendall(b"RELEASE\n")
        g.close()
        self.ls.close()


class GoldenTest(unittest.TestCase):
    def test_golden_forks_through_os_fork_and_learns_it_was_released(self):
        global _marker
        with tempfile.TemporaryDirectory() as d:
            # CPython's after-fork work runs in the child only with os.fork().
            marker = _marker = os.path.join(d, "after-fork-in-child")
            path = os.path.join(d, "fp.sock")
            controller = ScriptedController(path)
            os.environ["SMOLVM_FORKPOINT_SOCKET"] = path
            try:
                with self.assertWarnsRegex(RuntimeWarning, "scripted-controller"):
                    result = smolvm.forkpoint()
            finally:
                del os.environ["SMOLVM_FORKPOINT_SOCKET"]
                _marker = None
            controller.thread.join(10)
            self.assertIsNone(result, "the golden returns None once released")
            self.assertEqual(controller.lines[0], "HELLO\n")
            self.assertEqual(controller.lines[1], "CLONE 1\n")
            with open(marker) as f:
                child = f.read().split()
            self.assertEqual(len(child), 1)
            self.assertEqual(controller.lines[2], "FORKED 1 %s\n" % child[0])


    def test_refusal_names_the_reason(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "fp.sock")
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ls.bind(path)
            ls.listen(1)

            def refuse():
                c, _ = ls.accept()
                c.recv(64)
                c.sendall(b"ERR 16 another process of this machine waits at the forkpoint\n")
                c.close()

            t = threading.Thread(target=refuse)
            t.start()
            os.environ["SMOLVM_FORKPOINT_SOCKET"] = path
            try:
                with self.assertRaisesRegex(smolvm.ForkError, "already waits at the forkpoint") as cm, \
                        self.assertWarns(RuntimeWarning):
                    smolvm.forkpoint()
            finally:
                del os.environ["SMOLVM_FORKPOINT_SOCKET"]
                t.join(10)
                ls.close()
            self.assertEqual(cm.exception.errno, __import__("errno").EBUSY)


class CloneTest(unittest.TestCase):
    def test_clone_gets_environ_cuda_seeds_and_threads(self):
        rc, out, err = run("""
            import ctypes, os, random, torch
            from smolvm import _clone
            torch.cuda._lazy_init()
            torch.cuda._in_bad_fork = True            # as torch's fork handler leaves a child
            libc = ctypes.CDLL(None)                  # what libsmolvm-guest did in the clone
            libc.setenv(b"SMOLVM_FORK_INDEX", b"2", 1)
            libc.setenv(b"SMOLVM_FORK_NAME", b"kid-2", 1)
            libc.unsetenv(b"SMOLVM_FORKPOINT_SOCKET")
            assert os.environ.get("SMOLVM_FORK_INDEX") is None
            _clone.become_clone(2, 40, 3, torch)
            print(os.environ["SMOLVM_FORK_INDEX"], os.environ["SMOLVM_FORK_NAME"],
                  "SMOLVM_FORKPOINT_SOCKET" in os.environ, torch.cuda.is_initialized())
            print(torch.calls)
            print(random.random() == random.Random(42).random())
        """)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "2 kid-2 False True")
        self.assertEqual(lines[1], "[('manual_seed', 42), ('cuda.manual_seed_all', 42), ('set_num_threads', 3)]")
        self.assertEqual(lines[2], "True")

    def test_warm_up_runs_then_the_seeds_are_set_again(self):
        rc, out, err = run("""
            import random, torch
            from smolvm import _clone
            _clone.warm_up(lambda: print("warming", random.random() == random.Random(7).random()), 2, 5, torch)
            print(random.random() == random.Random(7).random(), torch.calls)
        """)
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(), ["warming False", "True [('manual_seed', 7), ('cuda.manual_seed_all', 7)]"])

    def test_a_warm_up_that_raises_ends_the_clone(self):
        rc, out, err = run("""
            from smolvm import _clone
            def boom():
                raise ValueError("no kernels today")
            try:
                _clone.warm_up(boom, 3, None, None)
            finally:
                print("after")  # never: the clone ends at once, no cleanup runs
        """)
        self.assertEqual(rc, 1)
        self.assertEqual(out, "")
        self.assertIn("smolvm.forkpoint: clone 3: the warm-up raised; the clone ends", err)
        self.assertIn("ValueError: no kernels today", err)
        # Its last line says what and where, for a parked fork's error (the log's end).
        self.assertRegex(err.strip().splitlines()[-1],
                         r"^smolvm.forkpoint: clone 3: warm-up failed: ValueError: no kernels today in boom \(<string>:4\) <- warm_up \(_clone.py:\d+\)$")

    def test_clone_seeds_differ_without_a_seed(self):
        from smolvm import _clone
        self.assertEqual(_clone.clone_seed(7, 3), 10)
        self.assertNotEqual(_clone.clone_seed(None, 0), _clone.clone_seed(None, 0))


class LibraryTest(unittest.TestCase):
    def test_order_layout_matches_the_library(self):
        lib = _guest.load()
        self.assertEqual(lib.smolvm_fork_order_size(), 332)

    def test_mark_frozen_without_the_cuda_shim_is_not_supported(self):
        with self.assertRaisesRegex(OSError, "needs the smolvm CUDA shim"):
            smolvm.torch._mark([(0x7f0000000000, 2 << 20)])


class FrozenPoolTest(unittest.TestCase):
    MODULE = """
        import threading, torch, smolvm, smolvm.torch
        torch.cuda._lazy_init()
        marked = []
        smolvm.mark_frozen = lambda address, size: marked.append((address, size))

        class Storage:
            def __init__(self, address, size):
                self.address, self.size = address, size
            def data_ptr(self):
                return self.address
            def nbytes(self):
                return self.size

        class Tensor:
            is_cuda = True
            def __init__(self, size):
                self.storage = Storage(torch.cuda._fake_alloc(size), size)
            def untyped_storage(self):
                return self.storage

        class Module:  # its weights made by a loader thread, as transformers 5 loads them
            def __init__(self):
                self.params = {}
                def load(name, size):
                    self.params[name] = Tensor(size)
                threads = [threading.Thread(target=load, args=("layer%d.weight" % i, 4 << 20)) for i in range(3)]
                [t.start() for t in threads]
                [t.join() for t in threads]
                self.params["norm.weight"] = Tensor(1 << 20)  # the calling thread
            def named_parameters(self):
                return sorted(self.params.items())
            def named_buffers(self):
                return []
    """

    def test_frozen_takes_every_threads_allocations(self):
        rc, out, err = run(textwrap.dedent(self.MODULE) + textwrap.dedent("""
            with smolvm.torch.frozen() as pool:
                m = Module()
            print("outside", smolvm.torch.outside_frozen(m))
            print("marked", len(marked), sum(n for _, n in marked) >> 20)
            print([c[0] for c in torch.calls])
        """))
        self.assertEqual(rc, 0, err)
        self.assertIn("outside []", out)
        self.assertIn("marked 4 13", out)
        self.assertIn("['_cuda_beginAllocateToPool', '_cuda_endAllocateToPool', '_cuda_releasePool', 'synchronize']",
                      out)

    def test_without_the_binding_warns_and_names_what_stayed_outside(self):
        # torch.cuda.use_mem_pool alone: the loader threads' weights miss the
        # pool (what the H200 showed: every clone copied the base).
        rc, out, err = run(textwrap.dedent(self.MODULE) + textwrap.dedent("""
            del torch._C._cuda_beginAllocateToPool
            with smolvm.torch.frozen():
                m = Module()
            print("outside", smolvm.torch.outside_frozen(m))
        """))
        self.assertEqual(rc, 0, err)
        self.assertIn("routes only the calling thread's allocations", err)
        self.assertIn("outside [('layer0.weight', 4194304), ('layer1.weight', 4194304), ('layer2.weight', 4194304)]",
                      out)


class FrozenSegmentsTest(unittest.TestCase):
    SNAPSHOT = [
        {"address": 0x1000000, "total_size": 0x200000, "segment_pool_id": (0, 0), "blocks": [
            {"address": 0x1000000, "size": 0x100000, "state": "active_allocated"},
            {"address": 0x1100000, "size": 0x100000, "state": "active_allocated"}]},
        {"address": 0x4000000, "total_size": 0x400000, "segment_pool_id": (1, 7), "blocks": [
            {"address": 0x4000000, "size": 0x300000, "state": "active_allocated"},
            {"address": 0x4300000, "size": 0x100000, "state": "inactive"}]},
    ]

    def test_pool_segments(self):
        self.assertEqual(smolvm.torch.segments_of_pool(self.SNAPSHOT, (1, 7)), [(0x4000000, 0x400000)])

    def test_module_segments_hold_only_the_module(self):
        got = smolvm.torch.segments_holding(self.SNAPSHOT, {0x4000000: (0x300000, "w")})
        self.assertEqual(got, [(0x4000000, 0x400000)])

    def test_describe_memory_by_pool_and_live_size(self):
        lines = smolvm.torch.describe_memory(self.SNAPSHOT, {"allocated_bytes.all.current": 5 << 20,
                                                             "reserved_bytes.all.current": 6 << 20}, [(1, 7)])
        self.assertEqual(lines, [
            "torch: allocated 5.0 MiB, reserved 6.0 MiB, inactive split 0.0 MiB",
            "pool default: 1 segments, reserved 2.0 MiB, live 2.0 MiB",
            "pool (1, 7) (frozen): 1 segments, reserved 4.0 MiB, live 3.0 MiB",
            "live outside frozen pools: 2 blocks, 2.0 MiB; largest: 2 x 1.0 MiB"])

    def test_shared_segment_names_the_tensor(self):
        with self.assertRaisesRegex(ValueError, "layer.weight shares its allocation"):
            smolvm.torch.segments_holding(self.SNAPSHOT, {0x1000000: (0x100000, "layer.weight")})


if __name__ == "__main__":
    unittest.main()
