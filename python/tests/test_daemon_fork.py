"""A Python golden with CUDA state forked by the CUDA daemon (no machine):
`smolvm cuda fork --pid` orders the forks through the cudart shim's
wait_order hook, the golden forks with os.fork() (smolvm.forkpoint), each
clone re-attaches its session; `smolvm cuda release` releases the golden.
Needs the build: SMOLVM_BINARY (the smolvm CLI) and SMOLVM_SHIM_DIR (the
directory of libcudart.so.13 and libsmolvm-guest.so), set by CTest."""

import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY = os.environ.get("SMOLVM_BINARY")
SHIM_DIR = os.environ.get("SMOLVM_SHIM_DIR")


def read(path):
    with open(path) as f:
        return f.read()


def wait_for(pred, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return False


@unittest.skipUnless(BINARY and SHIM_DIR, "needs SMOLVM_BINARY and SMOLVM_SHIM_DIR (run through CTest)")
class DaemonForkTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.sock = os.path.join(self.dir.name, "cuda.sock")
        with open(self.sock + ".log", "w") as log:
            self.daemon = subprocess.Popen([BINARY, "_cuda-daemon", self.sock, "--backend", "fake", "--pool", "1"],
                                           stdout=subprocess.DEVNULL, stderr=log)
        self.assertTrue(wait_for(lambda: os.path.exists(self.sock + ".admin")), "the daemon did not start")

    def tearDown(self):
        self.daemon.terminate()
        self.daemon.wait(20)
        self.dir.cleanup()

    def cuda(self, *args):
        p = subprocess.run([BINARY, "cuda", *args, "--socket", self.sock], capture_output=True, text=True,
                           timeout=60)
        return p.returncode, p.stdout + p.stderr

    def test_golden_forks_clones_and_is_released(self):
        out_path = os.path.join(self.dir.name, "golden.out")
        env = dict(os.environ, LD_LIBRARY_PATH=SHIM_DIR, SMOLVM_CUDA_SOCKET=self.sock,
                   SMOLVM_GUEST_LIB=os.path.join(SHIM_DIR, "libsmolvm-guest.so"),
                   PYTHONPATH=os.path.dirname(HERE))
        env.pop("SMOLVM_FORKPOINT_SOCKET", None)
        with open(out_path, "w") as out:
            golden = subprocess.Popen([sys.executable, os.path.join(HERE, "machine_cuda_golden.py"), "exit"],
                                      stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            self.assertTrue(wait_for(lambda: "golden ready" in read(out_path)), read(out_path))
            rc, text = self.cuda("fork", "--pid", str(golden.pid), "--count", "2", "--share", "on", "--wait", "20")
            self.assertEqual(rc, 0, text + read(out_path))
            self.assertEqual(text.count("fork: clone "), 2, text)
            for i in range(2):
                line = "clone idx=%d frozen=True private=True env_index=%d" % (i, i)
                self.assertTrue(wait_for(lambda: line in read(out_path)), read(out_path))
            rc, text = self.cuda("release", "--pid", str(golden.pid))
            self.assertEqual(rc, 0, text)
            self.assertEqual(golden.wait(20), 0, read(out_path))
            self.assertIn("golden released", read(out_path))
            self.assertNotIn("Traceback", read(out_path))
        finally:
            if golden.poll() is None:
                golden.kill()
                golden.wait()


if __name__ == "__main__":
    unittest.main()
