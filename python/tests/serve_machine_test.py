"""serve over real machines: CPU machines whose clone bodies are Python
(python/tests/serve_golden.py; no torch), as root. Skips, saying why, when
not root, without /usr/bin/python3, or when this build's serve has no parked
forks (the lease link, src/machine/lease_link.h, not in the tree yet).

  - the issue's shape end to end: results come back from the clones
  - a clone that exits without completing fails its lease with its exit
    status, and the pool refills
  - serve killed with SIGKILL while 8 leases are live, restarted: all 8 still
    held, heart-beaten, served payloads and completable; nothing orphaned
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import smolvm  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
GOLDEN = dict(cmd=["python3", "/opt/test/serve_golden.py"], volumes=[TESTS + ":/opt/test:ro"])


class ServeMachineTest(unittest.TestCase):
    def setUp(self):
        self.binary = os.environ.get("SMOLVM_BINARY")
        if not self.binary:
            self.skipTest("SMOLVM_BINARY is not set (CTest sets it)")
        if os.geteuid() != 0:
            self.skipTest("machines need root")
        if not os.access("/usr/bin/python3", os.X_OK):
            self.skipTest("no /usr/bin/python3 for the machines")
        self.home = tempfile.mkdtemp(prefix="serve-machine-")
        self.env = dict(os.environ, SMOLVM_HOME=self.home)
        self.start()
        if "without parked forks" in self.log_text():
            self.stop()
            shutil.rmtree(self.home, ignore_errors=True)
            self.skipTest("this build has no lease link (src/machine/lease_link.h): serve cannot park clones yet")

    def start(self):
        self.log = open(os.path.join(self.home, "serve.log"), "a")
        self.proc = subprocess.Popen([self.binary, "serve"], env=self.env, stdout=self.log, stderr=self.log)
        self.c = smolvm.Client(os.path.join(self.home, "serve.sock"))
        deadline = time.monotonic() + 30
        while self.log_text().count("serve: listening") < getattr(self, "starts", 0) + 1:
            self.assertIsNone(self.proc.poll(), self.log_text())
            self.assertLess(time.monotonic(), deadline, self.log_text())
            time.sleep(0.05)
        self.starts = getattr(self, "starts", 0) + 1

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)
        self.log.close()

    def log_text(self):
        with open(os.path.join(self.home, "serve.log")) as f:
            return f.read()

    def machines(self):
        out = subprocess.run([self.binary, "machine", "list", "--json"], env=self.env, capture_output=True, text=True)
        return json.loads(out.stdout or "[]")

    def tearDown(self):
        if not hasattr(self, "home"):
            return
        if self.proc.poll() is None:
            try:
                for p in self.c.pools():
                    p.delete()
                deadline = time.monotonic() + 60
                while self.machines() and time.monotonic() < deadline:
                    time.sleep(0.2)
            finally:
                self.stop()
        left = self.machines()
        for m in left:  # never leave a machine behind, even when the test failed
            subprocess.run([self.binary, "machine", "rm", "--name", m["name"], "--force", "--cascade"], env=self.env,
                           capture_output=True)
        subprocess.run([self.binary, "cuda", "shutdown"], env=self.env, capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)
        self.assertEqual(left, [], "machines left behind")

    def test_results_come_back_from_python_clones(self):
        pool = self.c.create_pool("py", golden=GOLDEN, min_ready=4, cpus=1)
        with pool.lease(4, payloads=[{"i": i} for i in range(4)], wait=120) as lease:
            results = lease.results(timeout=120)
        self.assertEqual([r["echo"]["i"] for r in results], [0, 1, 2, 3])
        self.assertEqual(len({r["idx"] for r in results}), 4)  # four clones (fork indices)

    def test_a_clone_that_exits_fails_its_lease_and_the_pool_refills(self):
        pool = self.c.create_pool("crash", golden=GOLDEN, min_ready=1, cpus=1)
        with pool.lease(1, payload={"crash": 7}, wait=120) as lease:
            with self.assertRaises(smolvm.LeaseFailed) as e:
                lease.results(timeout=120)
        self.assertIn("exited with code 7", str(e.exception))
        deadline = time.monotonic() + 120
        while pool.ready < 1:
            self.assertLess(time.monotonic(), deadline, pool.info)
            time.sleep(0.2)

    def test_sigkilled_serve_restarts_with_eight_live_leases(self):
        pool = self.c.create_pool("eight", golden=GOLDEN, min_ready=8, cpus=1, ttl_s=30)
        leases = [pool.lease(1, payload={"hold": 1, "i": i}, wait=180) for i in range(8)]
        held = sorted(m["machine"] for lease in leases for m in lease.members)
        self.stop(signal.SIGKILL)  # a refill may be half-way: its clones are the next serve's to remove
        self.start()
        live = {m["name"] for m in self.machines()}
        self.assertTrue(set(held) <= live, "leased clones lost: %s\n%s" % (set(held) - live, self.log_text()))
        # Nothing orphaned: every machine is the golden, a leased clone, or one the pool counts.
        deadline = time.monotonic() + 60
        while True:
            info = pool.refresh().info
            names = {m["name"] for m in self.machines()}
            if len(names) == 1 + len(held) + info["ready"] + info["forking"]:
                break
            self.assertLess(time.monotonic(), deadline, (sorted(names), info))
            time.sleep(0.2)
        for i, lease in enumerate(leases):
            self.assertEqual(lease.state, "active")
            lease.heartbeat()
            lease.send({"after": i})
        for i, lease in enumerate(leases):
            deadline = time.monotonic() + 60
            while not any(r.get("got", {}).get("after") == i for r in lease.replies()[0]):
                self.assertLess(time.monotonic(), deadline, lease.info)
                time.sleep(0.1)
            lease.complete({"done": i})
            self.assertEqual(lease.results(timeout=30), [{"done": i}])
            lease.release()
        self.assertEqual(self.c.leases(), [])


if __name__ == "__main__":
    unittest.main()
