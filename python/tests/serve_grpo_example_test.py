"""examples/grpo_loop.py end to end on the CPU path (issue 32, must-show 1):
`smolvm serve` over real machines, the example's learner
(examples/grpo_learner.py --stand-in: the pure-Python training step, no
torch) as the pool's golden, K learners kept across iterations, one dropped
and one added between iterations, each learner's adapters saved at the end.
As root (machines); skips, saying why, otherwise or without /usr/bin/python3.

What it checks, from the loop's JSON summary and the adapters' files:
  - every iteration's answers come back one per learner, in member order
    (several payloads per lease, replies in order);
  - a learner keeps its state across iterations: its cumulative step count
    grows by one episode (8 steps) per iteration, in the same clone machine;
  - the learner dropped before iteration 2 is in no later iteration, the one
    added before iteration 3 starts from the golden's state (8 steps);
  - finish() returns each remaining learner's adapters, written where the
    loop said; the pool's machines are gone afterwards;
  - each learner warmed up before it parked (forkpoint(warmup=...): a
    training step, undone), and its first episode's losses equal those of a
    learner that did not (--no-warmup).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import smolvm  # noqa: E402

LOOP = os.path.join(ROOT, "examples", "grpo_loop.py")
STEPS = 8  # the example's episode: 8 steps of 2 pairs


class GrpoExampleTest(unittest.TestCase):
    def setUp(self):
        self.binary = os.environ.get("SMOLVM_BINARY")
        if not self.binary:
            self.skipTest("SMOLVM_BINARY is not set (CTest sets it)")
        if os.geteuid() != 0:
            self.skipTest("machines need root")
        if not os.access("/usr/bin/python3", os.X_OK):
            self.skipTest("no /usr/bin/python3 for the machines")
        self.home = tempfile.mkdtemp(prefix="serve-grpo-")
        self.env = dict(os.environ, SMOLVM_HOME=self.home)
        self.log = open(os.path.join(self.home, "serve.log"), "a")
        self.proc = subprocess.Popen([self.binary, "serve"], env=self.env, stdout=self.log, stderr=self.log)
        self.sock = os.path.join(self.home, "serve.sock")
        deadline = time.monotonic() + 30
        while "serve: listening" not in self.log_text():
            self.assertIsNone(self.proc.poll(), self.log_text())
            self.assertLess(time.monotonic(), deadline, self.log_text())
            time.sleep(0.05)
        if "without parked forks" in self.log_text():
            self.skipTest("this build has no lease link: serve cannot park clones")

    def log_text(self):
        with open(os.path.join(self.home, "serve.log")) as f:
            return f.read()

    def machines(self):
        out = subprocess.run([self.binary, "machine", "list", "--json"], env=self.env, capture_output=True, text=True)
        return json.loads(out.stdout or "[]")

    def tearDown(self):
        if not hasattr(self, "proc"):
            return
        try:
            if self.proc.poll() is None:
                for p in smolvm.Client(self.sock).pools():  # the loop deletes its pool; a failed one may not have
                    p.delete()
                deadline = time.monotonic() + 60
                while self.machines() and time.monotonic() < deadline:
                    time.sleep(0.2)
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.log.close()
            left = self.machines()
            for m in left:
                subprocess.run([self.binary, "machine", "rm", "--name", m["name"], "--force", "--cascade"],
                               env=self.env, capture_output=True)
            shutil.rmtree(self.home, ignore_errors=True)
        self.assertEqual(left, [], "machines left behind")

    def loop(self, name, *args):
        """Runs the example's loop; its JSON summary."""
        out = os.path.join(self.home, name)
        os.mkdir(out)
        summary_path = os.path.join(self.home, name + ".json")
        r = subprocess.run([sys.executable, LOOP, "--stand-in", "--pool", name, "--socket", self.sock, "--out", out,
                            "--json", summary_path, "--ready-timeout", "60", "--episode-timeout", "60"] + list(args),
                           env=self.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + self.log_text())
        with open(summary_path) as f:
            return json.load(f), r.stdout, out

    def test_the_loop_keeps_its_learners_drops_one_and_adds_one(self):
        s, stdout, out = self.loop("grpo", "--learners", "3", "--iterations", "4", "--drop-at", "2", "--add-at", "3")
        self.assertIn("iteration 3: 3 learners [0, 1, 3]", stdout)
        rows = s["per_iteration"]
        self.assertEqual([row["learners"] for row in rows], [[0, 1, 2], [0, 1, 2], [0, 1], [0, 1, 3]])
        # Kept across iterations: the same machine, one more episode of steps each time.
        self.assertEqual([row["steps_total"] for row in rows],
                         [[8, 8, 8], [16, 16, 16], [24, 24], [32, 32, 8]])
        machine_of = {}
        for row in rows:
            for learner, machine in zip(row["learners"], row["machines"]):
                self.assertTrue(machine.startswith("smolsrv-"), machine)
                self.assertEqual(machine_of.setdefault(learner, machine), machine)
        self.assertEqual(len(set(machine_of.values())), 4)  # four clones, one per learner
        self.assertTrue(all(row["tokens"] == len(row["learners"]) * STEPS * 2 * 256 for row in rows), rows)
        # finish(): each remaining learner's adapters, where the loop said.
        self.assertEqual(sorted(os.path.basename(p) for p in s["adapters"]),
                         ["learner-0.json", "learner-1.json", "learner-3.json"])
        for p in s["adapters"]:
            with open(p) as f:
                self.assertEqual(len(json.load(f)["stand_in_adapter"]), 64)
        self.assertEqual(sorted(os.listdir(out)), ["learner-0.json", "learner-1.json", "learner-3.json"])
        deadline = time.monotonic() + 60
        while self.machines() and time.monotonic() < deadline:  # the loop deleted its pool
            time.sleep(0.2)
        self.assertEqual(self.machines(), [])
        # Each learner warmed up (a training step, undone) before it parked ...
        self.assertTrue(all(ms > 0 for ms in rows[0]["warmup_ms"]), rows[0])
        # ... and trained its first episode exactly as a learner that did not.
        cold, _, _ = self.loop("cold", "--learners", "3", "--iterations", "1", "--no-warmup")
        self.assertEqual(cold["per_iteration"][0]["warmup_ms"], [0, 0, 0])
        self.assertEqual(cold["per_iteration"][0]["last_losses"], rows[0]["last_losses"])
        self.assertEqual(cold["per_iteration"][0]["steps_total"], [8, 8, 8])


if __name__ == "__main__":
    unittest.main()
