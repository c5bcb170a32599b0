"""smolvm.shim_ops: natively there are no counters; through the cudart shim
(against `smolvm _cuda-daemon --backend fake`) it reads what a loop of steps
cost per step, by wire op. Needs SMOLVM_BINARY and SMOLVM_SHIM_DIR (CTest)
for the second part."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from smolvm import shim_ops

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY = os.environ.get("SMOLVM_BINARY")
SHIM_DIR = os.environ.get("SMOLVM_SHIM_DIR")

STEPS = textwrap.dedent("""
    import ctypes, json
    from smolvm import shim_ops
    rt = ctypes.CDLL("libcudart.so.13")  # local scope: shim_ops finds it loaded
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 4096) == 0
    a = shim_ops.read()
    for i in range(4):
        assert rt.cudaMemsetAsync(p, i, 4096, None) == 0
    assert rt.cudaDeviceSynchronize() == 0
    b = shim_ops.read()
    assert rt.cudaDeviceSynchronize() == 0  # nothing issued since: no round trip
    c = shim_ops.read()
    print(json.dumps({"available": shim_ops.available(), "steps": shim_ops.per_step(a, b, 4),
                      "idle_sync": shim_ops.per_step(b, c, 1)}))
""")


class NativeTest(unittest.TestCase):
    def test_without_the_shims_there_are_no_counters(self):
        self.assertFalse(shim_ops.available())
        self.assertIsNone(shim_ops.read())
        self.assertIsNone(shim_ops.per_step(None, None, 4))


@unittest.skipUnless(BINARY and SHIM_DIR, "needs SMOLVM_BINARY and SMOLVM_SHIM_DIR (run through CTest)")
class ThroughTheShimTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.sock = os.path.join(self.dir.name, "cuda.sock")
        with open(self.sock + ".log", "w") as log:
            self.daemon = subprocess.Popen([BINARY, "_cuda-daemon", self.sock, "--backend", "fake", "--pool", "1"],
                                           stdout=subprocess.DEVNULL, stderr=log)
        end = time.monotonic() + 20
        while not os.path.exists(self.sock + ".admin") and time.monotonic() < end:
            time.sleep(0.02)
        self.assertTrue(os.path.exists(self.sock + ".admin"), "the daemon did not start")

    def tearDown(self):
        self.daemon.terminate()
        self.daemon.wait(20)
        self.dir.cleanup()

    def test_a_loop_costs_its_ops_per_step(self):
        env = dict(os.environ, LD_LIBRARY_PATH=SHIM_DIR, SMOLVM_CUDA_SOCKET=self.sock,
                   PYTHONPATH=os.path.dirname(HERE))
        p = subprocess.run([sys.executable, "-c", STEPS], capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        got = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertTrue(got["available"])
        steps = got["steps"]
        # Four memsets queued, one synchronization over the four steps.
        self.assertEqual(steps["round_trips"], 0.25, steps)
        self.assertEqual(steps["queued"], 1.0, steps)
        self.assertEqual(steps["by_op"]["CtxSynchronize"], [0.25, 0.0], steps)
        self.assertEqual(list(steps["by_op"])[0], "CtxSynchronize", steps)  # the costliest first
        self.assertEqual(got["idle_sync"], {"round_trips": 0, "queued": 0, "by_op": {}}, got)


if __name__ == "__main__":
    unittest.main()
