"""The operators' commands against a real `smolvm serve --driver fake` on a
temporary $SMOLVM_HOME: `serve tenant add|ls|token|rm`, `pool create|ls|rm`,
`lease acquire|ls|complete|release`, `serve openapi`; each command's output
and its exit codes (docs/serve.md: 0 ok, 2 invalid argument, 3 not found,
4 conflict, 5 refused, 6 unavailable, 7 quota or not root), as root (the
operator) and as a tenant's uid. Run by CTest as serve_cli (src/serve/CMakeLists.txt)
with $SMOLVM_BINARY set."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALICE = 1001  # a tenant's uid
STRANGER = 4242  # no tenant's


class ServeCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.binary = os.environ.get("SMOLVM_BINARY")
        if not cls.binary:
            raise unittest.SkipTest("SMOLVM_BINARY is not set (CTest sets it)")
        cls.home = tempfile.mkdtemp(prefix="serve-cli-")
        os.chmod(cls.home, 0o755)  # other uids reach the socket inside
        cls.env = dict(os.environ, SMOLVM_HOME=cls.home)
        cls.env.pop("SMOLVM_SERVE_SOCKET", None)
        cls.log = open(os.path.join(cls.home, "serve.log"), "w")
        cls.proc = subprocess.Popen([cls.binary, "serve", "--driver", "fake"], env=cls.env, stdout=cls.log,
                                    stderr=cls.log)
        deadline = time.monotonic() + 30
        while "serve: listening" not in cls.log_text():
            if cls.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("serve did not start: " + cls.log_text())
            time.sleep(0.02)

    @classmethod
    def log_text(cls):
        with open(os.path.join(cls.home, "serve.log")) as f:
            return f.read()

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(timeout=30)
        cls.log.close()
        shutil.rmtree(cls.home, ignore_errors=True)

    def run_cli(self, *args, uid=None, env=None):
        def become():
            os.setgid(uid)
            os.setuid(uid)
        r = subprocess.run([self.binary] + list(args), env=env or self.env, capture_output=True, text=True,
                           timeout=120, preexec_fn=become if uid is not None else None)
        return r.returncode, r.stdout, r.stderr

    def ok(self, *args, **kw):
        code, out, err = self.run_cli(*args, **kw)
        self.assertEqual(code, 0, "%s: %s%s" % (" ".join(args), out, err))
        return out

    def fails(self, want, *args, **kw):
        code, out, err = self.run_cli(*args, **kw)
        self.assertEqual(code, want, "%s: exit %d: %s%s" % (" ".join(args), code, out, err))
        self.assertTrue(err.startswith("smolvm"), err)  # says why
        return err

    def as_root(self):
        if os.geteuid() != 0:
            self.skipTest("the operator is root (uid 0 on the socket)")

    def test_not_answering_is_6_naming_the_socket(self):
        empty = tempfile.mkdtemp(prefix="serve-cli-none-")
        self.addCleanup(shutil.rmtree, empty, True)
        env = dict(self.env, SMOLVM_HOME=empty)
        for args in (["pool", "ls"], ["lease", "ls"], ["serve", "tenant", "ls"]):
            err = self.fails(6, *args, env=env)
            self.assertIn(os.path.join(empty, "serve.sock"), err)

    def test_tenants(self):
        self.as_root()
        out = self.ok("serve", "tenant", "add", "carol", "--uid", "1003", "--max-leases", "4")
        self.assertEqual(out, "tenant carol added (uid 1003)\n")
        self.fails(4, "serve", "tenant", "add", "carol", "--uid", "1004")
        self.fails(2, "serve", "tenant", "add", "zero", "--uid", "0")
        self.fails(2, "serve", "tenant", "add", "nouid")
        out = self.ok("serve", "tenant", "add", "svc", "--token")
        self.assertRegex(out, r"^tenant svc added\ntoken: smolvm_[0-9a-f]+\n$")
        listed = json.loads(self.ok("serve", "tenant", "ls", "--json"))
        self.assertIn({"name": "carol", "uid": 1003, "max_leases": 4, "max_gpu_mib": 0},
                      [{k: t[k] for k in ("name", "uid", "max_leases", "max_gpu_mib")} for t in listed])
        self.assertRegex(self.ok("serve", "tenant", "ls"), r"(?m)^carol +1003 +4 +0$")
        self.assertRegex(self.ok("serve", "tenant", "token", "carol"), r"^smolvm_[0-9a-f]{16,}\n$")
        self.fails(3, "serve", "tenant", "token", "nobody")
        self.fails(3, "serve", "tenant", "token", "carol/../svc")
        self.ok("serve", "tenant", "rm", "carol")
        self.fails(3, "serve", "tenant", "rm", "carol")
        self.ok("serve", "tenant", "rm", "svc")
        # Only the operator: a tenant's uid is refused (5).
        self.ok("serve", "tenant", "add", "dave", "--uid", "1005")
        self.addCleanup(self.run_cli, "serve", "tenant", "rm", "dave")
        self.fails(5, "serve", "tenant", "ls", uid=1005)

    def test_pools_and_leases(self):
        self.as_root()
        out = self.ok("pool", "create", "p", "--min-ready", "2", "--ttl", "60", "--", "fake:hang")
        self.assertRegex(out, r"^pool p created \(golden smolsrv-[0-9a-f]+-\d+-g1, min_ready 2\)\n$")
        self.addCleanup(self.run_cli, "pool", "rm", "p")
        self.fails(4, "pool", "create", "p", "--", "fake:hang")
        self.fails(2, "pool", "create", "big", "--min-ready", "5000", "--", "fake:hang")
        self.fails(2, "pool", "create", "envy", "-e", "NOEQUALS", "--", "fake:hang")
        self.fails(2, "pool", "create", "bad name", "--", "fake:hang")
        deadline = time.monotonic() + 30
        while True:
            pools = {p["name"]: p for p in json.loads(self.ok("pool", "ls", "--json"))}
            if pools["p"]["ready"] == 2:
                break
            self.assertLess(time.monotonic(), deadline, pools)
            time.sleep(0.05)
        self.assertRegex(self.ok("pool", "ls"), r"(?m)^p +root +2 +0 +0 +2 *$")

        lease = json.loads(self.ok("lease", "acquire", "p", "--payload", '{"x": 1}', "--key", "k1"))
        self.assertEqual((lease["count"], lease["state"], lease["members"][0]["state"]), (1, "active", "running"))
        again = json.loads(self.ok("lease", "acquire", "p", "--key", "k1"))
        self.assertEqual(again["id"], lease["id"])  # the key's lease, not a second one
        self.fails(2, "lease", "acquire", "p", "--payload", "[1]")
        self.fails(2, "lease", "acquire", "p", "--count", "0")
        self.fails(3, "lease", "acquire", "nope")
        err = self.fails(6, "lease", "acquire", "p", "--count", "5")
        self.assertIn("ready clone(s) of the 5 asked for", err)
        self.assertRegex(self.ok("lease", "ls"), r"(?m)^%s +root +p +active +1 +running$" % lease["id"])
        self.assertEqual([x["id"] for x in json.loads(self.ok("lease", "ls", "--pool", "p", "--json"))], [lease["id"]])
        self.assertEqual(json.loads(self.ok("lease", "ls", "--pool", "other", "--json")), [])

        self.fails(2, "lease", "complete", lease["id"], "--result", "{bad")
        self.assertEqual(self.ok("lease", "complete", lease["id"], "--result", '{"ok": true}', "--exit-code", "3"),
                         "lease %s completed\n" % lease["id"])
        self.fails(4, "lease", "complete", lease["id"])
        done = [x for x in json.loads(self.ok("lease", "ls", "--json")) if x["id"] == lease["id"]][0]
        self.assertEqual((done["state"], done["members"][0]["result"], done["members"][0]["exit_code"]),
                         ("ended", {"ok": True}, 3))
        self.fails(3, "lease", "complete", "l-0000000000000000")
        self.assertEqual(self.ok("lease", "release", lease["id"]), "lease %s released\n" % lease["id"])
        self.fails(3, "lease", "release", lease["id"])

        # A name is one path segment: "p?x" and "p/drain" name no pool, and p lives on.
        self.fails(3, "pool", "rm", "p?x")
        self.fails(3, "pool", "rm", "p/acquires/k1")
        self.fails(3, "lease", "release", lease["id"] + "/heartbeat")
        self.assertIn("p", [x["name"] for x in json.loads(self.ok("pool", "ls", "--json"))])
        self.assertEqual(self.ok("pool", "rm", "p"), "pool p deleted\n")
        self.fails(3, "pool", "rm", "p")

    def test_a_tenants_uid_sees_its_own_and_its_quota(self):
        self.as_root()
        self.ok("serve", "tenant", "add", "alice", "--uid", str(ALICE), "--max-leases", "1")
        self.addCleanup(self.run_cli, "serve", "tenant", "rm", "alice")
        self.ok("pool", "create", "mine", "--min-ready", "2", "--", "fake:hang", uid=ALICE)
        self.addCleanup(self.run_cli, "pool", "rm", "mine", uid=ALICE)
        self.ok("pool", "create", "roots", "--", "fake:hang")
        self.addCleanup(self.run_cli, "pool", "rm", "roots")
        self.assertEqual([p["name"] for p in json.loads(self.ok("pool", "ls", "--json", uid=ALICE))], ["mine"])
        self.fails(3, "pool", "rm", "roots", uid=ALICE)  # another tenant's: as missing
        self.fails(3, "lease", "acquire", "roots", uid=ALICE)
        deadline = time.monotonic() + 30
        while json.loads(self.ok("pool", "ls", "--json", uid=ALICE))[0]["ready"] < 2:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        err = self.fails(7, "lease", "acquire", "mine", "--count", "2", uid=ALICE)
        self.assertIn("leased clones of its 1", err)
        lease = json.loads(self.ok("lease", "acquire", "mine", uid=ALICE))
        self.assertEqual(lease["tenant"], "alice")
        self.fails(5, "pool", "ls", uid=STRANGER)  # no tenant: refused, naming the command that adds one
        self.ok("lease", "release", lease["id"], uid=ALICE)

    def test_serve_refuses_a_second_serve_a_bad_driver_and_a_non_root_machine_driver(self):
        self.assertEqual(self.run_cli("serve", "--driver", "fake")[0], 4)  # another serve answers on the socket
        self.assertEqual(self.run_cli("serve", "--driver", "bogus")[0], 2)
        self.assertEqual(self.run_cli("serve", "--listen", "nocolon", "--driver", "fake")[0], 2)
        if os.geteuid() == 0:
            code, out, err = self.run_cli("serve", uid=STRANGER)
            self.assertEqual(code, 7, err)
            self.assertIn("needs root", err)

    def test_openapi_is_the_committed_document(self):
        doc = json.loads(self.ok("serve", "openapi"))
        with open(os.path.join(ROOT, "docs", "serve-openapi.json")) as f:
            committed = json.load(f)
        doc["info"]["version"] = committed["info"]["version"]
        self.assertEqual(doc, committed, "run: smolvm serve openapi > docs/serve-openapi.json")

    def test_help_footers_name_the_documented_exit_codes(self):
        with open(os.path.join(ROOT, "docs", "serve.md")) as f:
            text = f.read()
        rule = re.search(r"Exit codes of `serve`, `pool` and `lease` commands:(.*?)\n\n", text, re.S)
        self.assertIsNotNone(rule, "docs/serve.md: no exit-code rule")
        documented = {int(n) for n in re.findall(r"(?:^|, )(\d) ", re.sub(r"\([^)]*\)", "", rule.group(1)).replace("\n", " ").strip())}
        self.assertEqual(documented, set(range(8)), rule.group(1))
        for family in (["serve"], ["pool"], ["lease"]):
            out = self.ok(*(family + ["--help"]))
            footer = re.sub(r"\([^)]*\)", "", re.search(r"Exit codes: (.*)", out).group(1))
            codes = {int(n) for n in re.findall(r"(?:^|, )(\d) ", footer)}
            self.assertTrue(codes and codes <= documented, (family, footer))


if __name__ == "__main__":
    unittest.main()
