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
        self.assertIn("[('synchronize',), ('empty_cache',)]", out)


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

    def test_shared_segment_names_the_tensor(self):
        with self.assertRaisesRegex(ValueError, "layer.weight shares its allocation"):
            smolvm.torch.segments_holding(self.SNAPSHOT, {0x1000000: (0x100000, "layer.weight")})


if __name__ == "__main__":
    unittest.main()
