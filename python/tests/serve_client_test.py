"""The Python client against a real `smolvm serve --driver fake` (clones in
memory: no root, no machines) on a socket of a temporary $SMOLVM_HOME.
Run by CTest as serve_python_client (src/serve/CMakeLists.txt) with
$SMOLVM_BINARY set; the machine-backed twin is serve_machine_test."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import smolvm  # noqa: E402


class ServeClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        binary = os.environ.get("SMOLVM_BINARY")
        if not binary:
            raise unittest.SkipTest("SMOLVM_BINARY is not set (CTest sets it)")
        cls.home = tempfile.mkdtemp(prefix="serve-py-")
        cls.sock = os.path.join(cls.home, "serve.sock")
        env = dict(os.environ, SMOLVM_HOME=cls.home)
        cls.log = open(os.path.join(cls.home, "serve.log"), "w")
        cls.proc = subprocess.Popen([binary, "serve", "--driver", "fake"], env=env, stdout=cls.log, stderr=cls.log)
        deadline = time.monotonic() + 30
        while not os.path.exists(cls.sock):
            if cls.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("serve did not start: " + open(os.path.join(cls.home, "serve.log")).read())
            time.sleep(0.02)
        cls.c = smolvm.Client(cls.sock)

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=30)
        cls.log.close()
        shutil.rmtree(cls.home, ignore_errors=True)

    def pool(self, name, behaviour="fake:echo", **kw):
        p = self.c.create_pool(name, golden=dict(cmd=[behaviour], env={}), **kw)
        self.addCleanup(lambda: self.c.pool(name).delete())
        return p

    def test_the_issues_shape(self):
        pool = self.pool("shape", min_ready=8)
        with pool.lease(8, payload={"prompts": ["a", "b"]}, wait=30) as lease:
            results = lease.results(timeout=60)
            held = lease.id
        self.assertEqual(len(results), 8)
        for r in results:
            self.assertEqual(r["echo"], {"prompts": ["a", "b"]})
        self.assertEqual(len({r["machine"] for r in results}), 8)
        with self.assertRaises(smolvm.ServeError) as e:
            self.c.lease(held)
        self.assertEqual(e.exception.status, 404)  # released on exit
        self.assertEqual(self.c.pool("shape").name, "shape")

    def test_payloads_one_per_clone(self):
        pool = self.pool("each", min_ready=3)
        with pool.lease(3, payloads=[{"i": i} for i in range(3)], wait=30) as lease:
            self.assertEqual([r["echo"]["i"] for r in lease.results(timeout=30)], [0, 1, 2])

    def test_missing_pool_is_404(self):
        with self.assertRaises(smolvm.ServeError) as e:
            self.c.pool("nope")
        self.assertEqual((e.exception.status, e.exception.code), (404, "not_found"))

    def test_heartbeats_keep_a_lease_and_their_absence_loses_it(self):
        pool = self.pool("beat", behaviour="fake:hang", min_ready=2, ttl_s=1)
        kept = pool.lease(1, wait=30)
        lost = pool.lease(1, wait=30, heartbeat=False)
        t0 = time.monotonic()
        while lost.state != "expired":  # one TTL without heartbeats
            self.assertLess(time.monotonic() - t0, 10)
            time.sleep(0.05)
        self.assertEqual(lost.members[0]["state"], "reclaimed")
        while time.monotonic() - t0 < 3:  # three TTLs: the heart-beaten one lives on
            self.assertEqual(kept.state, "active")
            time.sleep(0.2)
        self.assertIsNone(kept.heartbeat_error)
        kept.release()
        lost.release()

    def test_a_crashed_clone_raises_lease_failed_with_its_exit_status(self):
        pool = self.pool("crash", behaviour="fake:crash", min_ready=1)
        with pool.lease(1, wait=30) as lease:
            with self.assertRaises(smolvm.LeaseFailed) as e:
                lease.results(timeout=30)
        self.assertIn("exited with code 3", str(e.exception))
        self.assertEqual(e.exception.results, [None])

    def test_results_time_out(self):
        pool = self.pool("slow", behaviour="fake:hang", min_ready=1)
        with pool.lease(1, wait=30) as lease:
            with self.assertRaises(TimeoutError):
                lease.results(timeout=0.3)

    def test_idempotency_key_returns_the_same_lease(self):
        pool = self.pool("idem", behaviour="fake:hang", min_ready=2)
        a = pool.lease(1, wait=30, idempotency_key="k")
        b = pool.lease(1, wait=30, idempotency_key="k")
        self.assertEqual(a.id, b.id)
        a.release()
        b.release()

    def test_send_and_replies(self):
        pool = self.pool("talk", behaviour="fake:reply", min_ready=1)
        with pool.lease(1, payload={"n": 1}, wait=30) as lease:
            lease.send({"n": 2})
            deadline = time.monotonic() + 10
            while len(lease.replies()[0]) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual([r["echo"]["n"] for r in lease.replies()[0]], [1, 2])
            lease.complete({"done": True})
            self.assertEqual(lease.results(timeout=5), [{"done": True}])

    def test_episodes_answers_in_member_order(self):
        pool = self.pool("episodes", behaviour="fake:reply", min_ready=3)
        with pool.lease(3, payloads=[{"i": i} for i in range(3)], wait=30) as lease:
            self.assertEqual([r["echo"]["i"] for r in lease.results(timeout=10)], [0, 1, 2])
            for e in range(2, 6):
                self.assertEqual(lease.send(payloads=[{"e": e, "i": i} for i in range(3)]), e)
                self.assertEqual([(r["echo"]["e"], r["echo"]["i"]) for r in lease.results(timeout=10)],
                                 [(e, 0), (e, 1), (e, 2)])
            self.assertEqual(lease.finish(timeout=10), [{"replies": 5}] * 3)
            self.assertEqual(lease.state, "ended")

    def test_a_learner_dropped_and_one_added(self):
        pool = self.pool("elastic", behaviour="fake:reply", min_ready=4)
        with pool.lease(3, payload={"n": 1}, wait=30) as lease:
            lease.results(timeout=10)
            lease.drop(1)
            self.assertEqual(lease.learners, [0, 2])
            with self.assertRaises(smolvm.ServeError) as e:
                lease.send(payloads=[{}, {}, {}])
            self.assertEqual(e.exception.status, 409)
            lease.send(payloads=[{"m": 0}, {"m": 2}])
            self.assertEqual([r["echo"]["m"] for r in lease.results(timeout=10)], [0, 2])
            self.assertEqual(lease.add(1, wait=30), [3])
            self.assertEqual(lease.learners, [0, 2, 3])
            lease.send(payloads=[{"m": m} for m in lease.learners])
            self.assertEqual([r["echo"]["m"] for r in lease.results(timeout=10)], [0, 2, 3])
            lease.end(member=0)  # finishes on its own; gone from later episodes
            lease.refresh()
            self.assertEqual(lease.learners, [2, 3])
            lease.send({"m": "all"})
            self.assertEqual(len(lease.results(timeout=10)), 2)
            self.assertEqual(lease.finish(timeout=10), [{"replies": 4}, {"replies": 2}])

    def test_empty_pool_refuses_naming_its_figures(self):
        pool = self.pool("empty", min_ready=0)
        with self.assertRaises(smolvm.ServeError) as e:
            pool.lease(2, wait=0)
        self.assertEqual(e.exception.status, 503)
        self.assertIn("0 ready clone(s) of the 2 asked for", e.exception.message)

    def test_a_waiting_acquire_is_served_when_a_clone_parks(self):
        pool = self.pool("wait", behaviour="fake:hang", min_ready=1, max=1)  # max 1: the next clone waits for room
        first = pool.lease(1, wait=30)
        got = {}
        t = threading.Thread(target=lambda: got.update(lease=pool.lease(1, wait=60)))
        t.start()
        time.sleep(0.2)  # the second acquire is waiting (a release before it arrives would serve it all the same)
        self.assertTrue(t.is_alive())
        first.release()  # room again: the pool refills, the waiter takes the clone
        t.join(timeout=60)
        self.assertFalse(t.is_alive())
        self.assertEqual(got["lease"].state, "active")
        got["lease"].release()

    def test_a_waiting_acquire_is_cancelled_by_its_key(self):
        pool = self.pool("cancel", min_ready=0)
        err = {}

        def wait():
            try:
                pool.lease(1, wait=60, idempotency_key="w1")
            except smolvm.ServeError as e:
                err["e"] = e
        t = threading.Thread(target=wait)
        t.start()
        deadline = time.monotonic() + 30
        while True:  # until serve knows the acquire waits
            try:
                pool.cancel_acquire("w1")
                break
            except smolvm.ServeError as e:
                self.assertEqual(e.status, 404)
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)
        t.join(timeout=30)
        self.assertEqual((err["e"].status, err["e"].code), (409, "cancelled"))
        with self.assertRaises(smolvm.ServeError) as e:
            pool.cancel_acquire("w1")  # nothing waits now
        self.assertEqual(e.exception.status, 404)

    def test_logs_and_exec(self):
        pool = self.pool("shell", behaviour="fake:hang", min_ready=1)
        with pool.lease(1, wait=30) as lease:
            name = lease.members[0]["machine"]
            self.assertEqual(lease.logs(), ("fake log of %s\n" % name, len(name) + 13, True))
            self.assertEqual(lease.exec(["echo", "hi"])["stdout"], "%s: echo hi\n" % name)
            with self.assertRaises(smolvm.ServeError) as e:
                lease.exec(["echo"], member=3)
            self.assertEqual(e.exception.status, 400)

    def test_openapi_and_metrics(self):
        doc = self.c.request("GET", "/v1/openapi.json")
        self.assertIn("/v1/pools/{pool}/leases", doc["paths"])
        if os.geteuid() == 0:
            self.assertIn("smolvm_serve_http_requests_total", self.c.metrics())


class ServeTlsTest(unittest.TestCase):
    """serve on TCP with TLS (--listen, --tls-cert, --tls-key) and bearer tokens: the whole loop over
    https with the tenant's token; no token or a wrong one 401; an unverified certificate or clear
    text gets nothing."""

    @classmethod
    def setUpClass(cls):
        binary = os.environ.get("SMOLVM_BINARY")
        if not binary:
            raise unittest.SkipTest("SMOLVM_BINARY is not set (CTest sets it)")
        if os.geteuid() != 0:
            raise unittest.SkipTest("tokens are minted by the operator (root on the socket)")
        if not shutil.which("openssl"):
            raise unittest.SkipTest("no openssl command to make a certificate (scripts/setup.sh installs it)")
        cls.home = tempfile.mkdtemp(prefix="serve-tls-")
        cls.cert, cls.key = os.path.join(cls.home, "c.pem"), os.path.join(cls.home, "k.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", cls.key, "-out", cls.cert,
                        "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        env = dict(os.environ, SMOLVM_HOME=cls.home)
        cls.logpath = os.path.join(cls.home, "serve.log")
        cls.log = open(cls.logpath, "w")
        cls.proc = subprocess.Popen([binary, "serve", "--driver", "fake", "--listen", "127.0.0.1:0", "--tls-cert",
                                     cls.cert, "--tls-key", cls.key], env=env, stdout=cls.log, stderr=cls.log)
        deadline = time.monotonic() + 30
        while True:
            with open(cls.logpath) as f:
                m = re.search(r"and 127\.0\.0\.1:(\d+) \(TLS\)", f.read())
            if m:
                break
            if cls.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("serve did not start: " + open(cls.logpath).read())
            time.sleep(0.02)
        cls.url = "https://127.0.0.1:" + m.group(1)
        root = smolvm.Client(os.path.join(cls.home, "serve.sock"))
        cls.token = root.request("POST", "/v1/tenants", {"name": "remote", "token": True})["token"]

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=30)
        cls.log.close()
        shutil.rmtree(cls.home, ignore_errors=True)

    def test_the_loop_over_https_with_a_token(self):
        c = smolvm.Client(url=self.url, token=self.token, cafile=self.cert)
        self.assertEqual(c.health()["tenant"], "remote")
        pool = c.create_pool("tls", golden=dict(cmd=["fake:echo"]), min_ready=2)
        try:
            with pool.lease(2, payload={"over": "tls"}, wait=30) as lease:
                self.assertEqual([r["echo"] for r in lease.results(timeout=30)], [{"over": "tls"}] * 2)
        finally:
            c.pool("tls").delete()

    def test_no_token_or_a_wrong_one_is_401(self):
        for token in (None, "smolvm_" + "0" * 64):
            with self.assertRaises(smolvm.ServeError) as e:
                smolvm.Client(url=self.url, token=token, cafile=self.cert).pools()
            self.assertEqual((e.exception.status, e.exception.code), (401, "unauthenticated"))

    def test_an_unverified_certificate_or_clear_text_gets_nothing(self):
        with self.assertRaises(smolvm.ServeError) as e:
            smolvm.Client(url=self.url, token=self.token).health()  # the system's CAs do not know it
        self.assertIn("CERTIFICATE_VERIFY_FAILED", e.exception.message)
        with self.assertRaises(smolvm.ServeError) as e:
            smolvm.Client(url=self.url.replace("https", "http"), token=self.token, timeout=10).health()
        self.assertNotEqual(e.exception.status, 200)


if __name__ == "__main__":
    unittest.main()
