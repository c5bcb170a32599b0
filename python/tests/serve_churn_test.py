"""Churn: 1,000 acquire/complete cycles on a pool leave nothing behind and
serve's memory flat (issue 31, must-show 1). Runs `smolvm serve` with
$SERVE_DRIVER (fake by default: clones in memory; "machine" for CPU machines
with Python clone bodies, as root, once the lease link is in the build).

Checked after the cycles: serve's RSS grew less than 2 MiB between cycle 100
and cycle 1,000; its open descriptors are as many as at cycle 100; no lease
or leased clone row is left in serve.db; the machines that exist are the
pool's golden and its parked clones only. Once the pool is deleted: no
machine, no pool, clone or lease row, no process of this $SMOLVM_HOME but
serve (supervisors, exec relays; a CPU pool has no CUDA workers), and for
the machine driver no cgroup or mount left either."""

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import smolvm  # noqa: E402

CYCLES = int(os.environ.get("SERVE_CHURN_CYCLES", "1000"))
DRIVER = os.environ.get("SERVE_DRIVER", "fake")
TESTS = os.path.dirname(os.path.abspath(__file__))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    """serve's open descriptors, the fewest seen over half a second: a connection the client just
    closed stays open on serve's side until serve reads its end, so one sample can count a request
    that is over (CI: 13 then 14, a run beside it 9 then 10); a leaked descriptor is in every sample."""
    seen = []
    for _ in range(10):
        seen.append(len(os.listdir("/proc/%d/fd" % pid)))
        time.sleep(0.05)
    return min(seen)


def processes_of(home):
    """Host processes that belong to this $SMOLVM_HOME: its environment names it (serve, the
    machines' supervisors, relays of exec) or its command line does. Nothing else remains once
    serve's machines are gone."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ("SMOLVM_HOME=" + home).encode() in env or home in cmd:
            found[int(d)] = cmd.strip()
    return found


class ServeChurnTest(unittest.TestCase):
    def setUp(self):
        binary = os.environ.get("SMOLVM_BINARY")
        if not binary:
            self.skipTest("SMOLVM_BINARY is not set (CTest sets it)")
        if DRIVER == "machine" and os.geteuid() != 0:
            self.skipTest("the machine driver needs root")
        self.binary = binary
        self.home = tempfile.mkdtemp(prefix="serve-churn-")
        self.env = dict(os.environ, SMOLVM_HOME=self.home)
        self.log = open(os.path.join(self.home, "serve.log"), "w")
        self.proc = subprocess.Popen([binary, "serve", "--driver", DRIVER], env=self.env, stdout=self.log,
                                     stderr=self.log)
        sock = os.path.join(self.home, "serve.sock")
        deadline = time.monotonic() + 30
        while "serve: listening" not in self.log_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = self.log_text()
                self.cleanup()
                self.fail("serve did not start: " + text)
            time.sleep(0.02)
        self.c = smolvm.Client(sock)
        if "without parked forks" in self.log_text():
            self.cleanup()
            self.skipTest("this build has no lease link (src/machine/lease_link.h): serve cannot park clones yet")

    def log_text(self):
        with open(os.path.join(self.home, "serve.log")) as f:
            return f.read()

    def cleanup(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)
        del self.proc

    def tearDown(self):
        if hasattr(self, "proc"):
            try:
                for p in self.c.pools():
                    p.delete()
            except smolvm.ServeError:
                pass
            if DRIVER == "machine":  # a failed run's machines go before serve does (nothing left behind)
                deadline = time.monotonic() + 60
                while self.machines() and time.monotonic() < deadline:
                    time.sleep(0.2)
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.log.close()
            if DRIVER == "machine":
                for name in self.machines():  # what serve did not remove in time
                    subprocess.run([self.binary, "machine", "rm", "--name", name, "--force"], env=self.env,
                                   capture_output=True)
                subprocess.run([self.binary, "cuda", "shutdown"], env=self.env, capture_output=True)
            shutil.rmtree(self.home, ignore_errors=True)

    def machines(self):
        out = subprocess.run([self.binary, "machine", "list", "--json"], env=self.env, capture_output=True, text=True)
        import json
        return [m["name"] for m in json.loads(out.stdout or "[]")]

    def settle(self, pool):
        """Waits until the reclaimer is idle and the pool holds exactly min_ready parked clones, nothing
        forking or leased: the moments the descriptor counts compare (each parked clone's lease link is
        a descriptor of serve's, so a count taken mid-refill differs by the clones in flight)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            info = pool.refresh().info
            if (not self.c.capacity()["reclaims_pending"] and info["forking"] == 0 and info["leased"] == 0
                    and info["ready"] == info["min_ready"]):
                return info
            time.sleep(0.05)
        self.fail("the pool did not settle: %r" % pool.refresh().info)

    def test_a_thousand_cycles_leave_nothing_behind(self):
        if DRIVER == "machine":
            golden = dict(cmd=["python3", "/opt/test/serve_golden.py"], volumes=[TESTS + ":/opt/test:ro"])
        else:
            golden = dict(cmd=["fake:echo"])
        pool = self.c.create_pool("churn", golden=golden, min_ready=2, cpus=0)
        mine = pool.info["golden_machine"].rsplit("-", 2)[0] + "-"  # "smolsrv-<tag>-": this serve's machines
        base_rss = base_fds = None
        for i in range(CYCLES):
            with pool.lease(1, payload={"i": i}, wait=120) as lease:
                r = lease.results(timeout=120)
                self.assertEqual(r[0]["echo"]["i"], i)
            if i == min(99, CYCLES // 10):
                self.settle(pool)
                base_rss, base_fds = rss_kib(self.proc.pid), fds(self.proc.pid)
        self.settle(pool)
        end_rss, end_fds = rss_kib(self.proc.pid), fds(self.proc.pid)
        growth = end_rss - base_rss
        print("serve RSS at cycle 100: %d KiB, at cycle %d: %d KiB (growth %d KiB); fds %d -> %d"
              % (base_rss, CYCLES, end_rss, growth, base_fds, end_fds), file=sys.stderr)
        self.assertLess(growth, 2048, "serve's RSS grew %d KiB between cycle 100 and %d" % (growth, CYCLES))
        self.assertLessEqual(end_fds, base_fds)
        # The reclaimer catches up, then only the golden and the parked clones remain.
        deadline = time.monotonic() + 60
        while self.c.capacity()["reclaims_pending"] and time.monotonic() < deadline:
            time.sleep(0.05)
        info = pool.refresh().info
        self.assertEqual(info["leased"], 0)
        self.assertEqual(self.c.leases(), [])
        db = sqlite3.connect(os.path.join(self.home, "serve.db"))
        self.assertEqual(db.execute("SELECT COUNT(*) FROM leases").fetchone()[0], 0)
        rows = [r[0] for r in db.execute("SELECT row FROM clones")]
        db.close()
        self.assertTrue(all('"state":"leased"' not in r for r in rows), rows)
        self.assertLessEqual(len(rows), 2 + info["forking"])
        if DRIVER == "machine":
            names = self.machines()
            self.assertLessEqual(len(names), 1 + 2 + info["forking"], names)
        pool.delete()
        deadline = time.monotonic() + 60
        while (self.c.capacity()["reclaims_pending"] or self.c.capacity()["machines"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.c.capacity()["machines"], 0)
        self.assertEqual(self.c.pools(), [])
        db = sqlite3.connect(os.path.join(self.home, "serve.db"))
        for table in ("pools", "clones", "leases"):
            self.assertEqual(db.execute("SELECT COUNT(*) FROM %s" % table).fetchone()[0], 0, table)
        db.close()
        if DRIVER == "machine":
            deadline = time.monotonic() + 60
            while self.machines() and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertEqual(self.machines(), [])
        # No supervisor, relay or worker of this home left: serve alone (one exiting gets a moment).
        deadline = time.monotonic() + 30
        while set(processes_of(self.home)) != {self.proc.pid} and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(set(processes_of(self.home)), {self.proc.pid}, processes_of(self.home))
        if DRIVER == "machine":
            with open("/proc/self/mountinfo") as f:
                mounts = [line for line in f if self.home in line]
            self.assertEqual(mounts, [], "mounts left behind")
            cgroups = []
            for root, dirs, _ in os.walk("/sys/fs/cgroup"):
                cgroups += [os.path.join(root, d) for d in dirs if d.startswith(mine)]
            self.assertEqual(cgroups, [], "cgroups left behind")


if __name__ == "__main__":
    unittest.main()
