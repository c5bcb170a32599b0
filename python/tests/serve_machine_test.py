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
        # Each member's result comes from its own clone: its machine's hostname. (Each clone's
        # program is pid 2 of its own pid namespace, as the golden's: the same pid, other processes.)
        self.assertEqual([r["host"] for r in results], [m["machine"] for m in lease.members])
        self.assertEqual({r["pid"] for r in results}, {2})

    def test_exec_and_logs_in_a_leased_clone(self):
        pool = self.c.create_pool("ex", golden=GOLDEN, min_ready=1, cpus=1)
        with pool.lease(1, payload={"hold": 1, "tag": "x7"}, wait=120) as lease:
            name = lease.members[0]["machine"]
            deadline = time.monotonic() + 60
            text, offset, running = lease.logs()
            while '"tag": "x7"' not in text:
                self.assertLess(time.monotonic(), deadline, text)
                time.sleep(0.1)
                more, offset, running = lease.logs(offset=offset)
                text += more
            self.assertTrue(running)
            self.assertIn('clone 0 got {"hold": 1, "tag": "x7"}', text)
            r = lease.exec(["sh", "-c", "echo out; echo err >&2; cat /proc/sys/kernel/hostname; exit 3"])
            self.assertEqual((r["exit_code"], r["stdout"], r["stderr"], r["timed_out"]), (3, "out\n" + name + "\n", "err\n", False))
            # A command past its timeout is killed, with what it started in the clone.
            t0 = time.monotonic()
            r = lease.exec(["sh", "-c", "sleep 300 & sleep 301"], timeout=1)
            self.assertTrue(r["timed_out"], r)
            self.assertLess(time.monotonic() - t0, 30)
            deadline = time.monotonic() + 10
            while True:
                ps = lease.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"])["stdout"]
                if "sleep 30" not in ps:
                    break
                self.assertLess(time.monotonic(), deadline, "the timed-out command still runs in the clone: " + ps)
                time.sleep(0.1)
            r = lease.exec(["/no/such/program"])
            self.assertNotEqual(r["exit_code"], 0, r)
            self.assertIn("cannot run '/no/such/program'", r["stderr"])
            self.assertEqual(lease.state, "active")  # the lease lives on
            lease.send({"after": 1})
            deadline = time.monotonic() + 60
            while not lease.replies()[0]:
                self.assertLess(time.monotonic(), deadline, lease.info)
                time.sleep(0.1)

    def test_a_tenants_uid_reaches_serve_on_its_socket(self):
        # /var/lib/smolvm as the docs install it: serve's socket (0666) is every tenant's way in, so
        # the home must stay reachable by them while serve drives machines below it.
        os.chmod(self.home, 0o755)
        self.c.request("POST", "/v1/tenants", {"name": "t1", "uid": 1001})
        pool = self.c.create_pool("reach", golden=GOLDEN, min_ready=1, cpus=1)
        deadline = time.monotonic() + 120
        while pool.ready < 1:
            self.assertLess(time.monotonic(), deadline, pool.info)
            time.sleep(0.2)
        code = ("import sys; sys.path.insert(0, %r); import smolvm; c = smolvm.Client(%r); "
                "print(c.health()['tenant'], [p.name for p in c.pools()])"
                % (os.path.join(TESTS, ".."), os.path.join(self.home, "serve.sock")))

        def become():
            os.setgid(1001)
            os.setuid(1001)
        r = subprocess.run(["/usr/bin/python3", "-c", code], preexec_fn=become, capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (0, "t1 []\n"),
                         "uid 1001 did not reach serve at %s/serve.sock (mode %o): %s"
                         % (self.home, os.stat(self.home).st_mode & 0o7777, r.stderr))

    def test_serve_holds_the_cuda_daemon_between_pools_and_never_parents_it(self):
        # The daemon on its fake backend, with an idle exit of 1 s: only serve's hold keeps it.
        self.stop()
        self.env.update(SMOLVM_CUDA_BACKEND="fake", SMOLVM_CUDA_IDLE_EXIT="1")
        self.start()
        pool = self.c.create_pool("cu", golden=dict(GOLDEN, cuda=True), min_ready=1, cpus=1)
        deadline = time.monotonic() + 120
        while pool.ready < 1:
            self.assertLess(time.monotonic(), deadline, pool.info)
            time.sleep(0.2)
        with open(os.path.join(self.home, "cuda", "daemon.json")) as f:
            daemon = json.load(f)["pid"]
        with open("/proc/%d/stat" % daemon) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        self.assertNotEqual(ppid, self.proc.pid, "the CUDA daemon is serve's child")
        with pool.lease(1, payload={"i": 1}, wait=60) as lease:
            self.assertEqual(lease.results(timeout=60)[0]["echo"], {"i": 1})
        pool.delete()
        deadline = time.monotonic() + 60
        while self.machines():
            self.assertLess(time.monotonic(), deadline, self.machines())
            time.sleep(0.1)
        time.sleep(3)  # three idle exits' worth with no machine: held, it lives on
        self.assertTrue(os.path.exists("/proc/%d" % daemon), "the daemon stopped between pools:\n" + self.log_text())
        # serve killed: its hold goes with it, and the daemon (no child of serve) stops when idle.
        self.stop(signal.SIGKILL)
        deadline = time.monotonic() + 60
        while os.path.exists("/proc/%d" % daemon):
            self.assertLess(time.monotonic(), deadline, "the unheld daemon did not stop when idle")
            time.sleep(0.1)
        self.start()

    def test_each_golden_has_its_own_host_uid_range_and_its_clones_share_it(self):
        a = self.c.create_pool("ua", golden=GOLDEN, min_ready=2, cpus=1)
        b = self.c.create_pool("ub", golden=GOLDEN, min_ready=1, cpus=1)

        def uid_map(lease, member):
            r = lease.exec(["cat", "/proc/self/uid_map"], member=member)
            self.assertEqual(r["exit_code"], 0, r)
            inside, host, count = r["stdout"].split()
            return int(inside), int(host), int(count)
        with a.lease(2, payload={"hold": 1}, wait=120) as la, b.lease(1, payload={"hold": 1}, wait=120) as lb:
            a0, a1, b0 = uid_map(la, 0), uid_map(la, 1), uid_map(lb, 0)
        self.assertEqual(a0, a1)  # a golden's clones: its range
        self.assertNotEqual(a0[1], b0[1])  # two goldens (so two tenants): two ranges
        for inside, host, count in (a0, b0):
            self.assertEqual((inside, count), (0, 65536))
            self.assertGreater(host, 0)  # root inside is no host root
        self.assertGreaterEqual(abs(a0[1] - b0[1]), 65536)  # the ranges do not overlap

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
        # A TTL of 3 s: the leases outlive the restart and what follows only by the Python client's
        # background heartbeats (every second), which must resume against the new serve.
        pool = self.c.create_pool("eight", golden=GOLDEN, min_ready=8, cpus=1, ttl_s=3)
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
        time.sleep(4)  # longer than a TTL without our calls: the background heartbeats alone hold them
        for lease in leases:
            self.assertEqual(lease.state, "ended")  # never "expired"
            self.assertIsNone(lease.heartbeat_error)
            lease.release()
        self.assertEqual(self.c.leases(), [])


if __name__ == "__main__":
    unittest.main()
