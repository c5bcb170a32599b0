"""The torch learner's contract where there is no torch (bench/peers/peft_dpo.py):
its exit codes and messages, the seed's environment variables, and the events
the bench reads (dry-run mode: everything but torch). Its training itself runs
on the H200 only (scripts/device-torch-fork.sh)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "peers", "peft_dpo.py")


def run(args, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("SMOLVM_TORCH_DRY_RUN", "SMOLVM_FORKPOINT_SOCKET")}
    e.update(env)
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True, timeout=60, env=e)


def has_real_torch():
    p = subprocess.run([sys.executable, "-c", "import torch, transformers, peft"], capture_output=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    return p.returncode == 0


class TorchLearnerContractTest(unittest.TestCase):
    @unittest.skipIf(has_real_torch(), "this Python has torch")
    def test_without_torch_says_so_and_exits_3(self):
        for args in (["--probe"], ["--config", "qwen2.5-0.5b"]):
            p = run(args)
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("torch is not importable by %s" % sys.executable, p.stderr)

    def test_bad_arguments_exit_2_naming_the_fix(self):
        with tempfile.TemporaryDirectory() as d:
            for args, want in ((["--config", "qwen2.5-0.5b", "--device", "cpu"], "runs on cuda only"),
                               (["--config", "qwen2.5-0.5b", "--method", "sft"], "runs dpo only"),
                               ([], "give one of --model DIR"),
                               (["--model", d, "--maxseq", "8"], "below the shortest example"),
                               (["--model", d + "/none"], "no such directory")):
                p = run(args)
                self.assertEqual(p.returncode, 2, (args, p.stderr))
                self.assertIn(want, p.stderr)

    def test_events_follow_the_learners_contract_from_the_seeds_variables(self):
        with tempfile.TemporaryDirectory() as d:
            coord = os.path.join(d, "coord")
            p = run(["--steps", "3"], SMOLVM_TORCH_DRY_RUN="1", MODEL=d, LEARNER_ID="5", COORD=coord, ARM="fork",
                    BATCH="3", MAXSEQ="64")
            self.assertEqual(p.returncode, 0, p.stderr)
            events = [json.loads(line) for line in open(os.path.join(coord, "learner_5.jsonl"))]
            self.assertEqual([e["event"] for e in events], ["ready", "step", "step", "step", "done"])
            ready, done = events[0], events[-1]
            self.assertEqual((ready["lid"], ready["arm"]), (5, "fork"))
            self.assertGreaterEqual(ready["load_ms"], 0)
            for key in ("lid", "arm", "tok_s", "train_s", "step_ms", "loss0", "lossN", "losses", "peak_gb", "t"):
                self.assertIn(key, done)
            self.assertEqual(done["losses"], [e["loss"] for e in events[1:4]])
            self.assertAlmostEqual(done["tok_s"], 3 * 3 * 64 / done["train_s"])
            # stdout carries the same lines
            self.assertEqual([json.loads(l)["event"] for l in p.stdout.splitlines()], [e["event"] for e in events])

    def test_fork_without_a_controller_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            p = run(["--model", d, "--fork", "--device", "cpu"], SMOLVM_TORCH_DRY_RUN="1")
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("--fork: smolvm.forkpoint: waiting for a fork order: no fork controller", p.stderr)


class TqdmMonitorTest(unittest.TestCase):
    """peft_dpo's golden stops tqdm's monitor thread (transformers' "Loading
    weights" bar starts it), so the forkpoint warns about no thread; shown
    with a fake tqdm (python/tests/fake_tqdm)."""

    def test_monitor_stopped_and_never_restarted(self):
        script = "\n".join([
            "import sys, threading, warnings",
            "sys.path.insert(0, %r)" % os.path.join(HERE, "..", "..", "bench", "peers"),
            "import tqdm, peft_dpo",
            "from smolvm import _rules",
            "tqdm.tqdm_asyncio(range(3))",
            "print('before', sorted(t.name for t in threading.enumerate()))",
            "peft_dpo.no_tqdm_monitor()",
            "tqdm.tqdm_asyncio(range(3)); tqdm.tqdm(range(3))",
            "print('after', sorted(t.name for t in threading.enumerate()))",
            "with warnings.catch_warnings(record=True) as w:",
            "    warnings.simplefilter('always')",
            "    _rules.check(None)",
            "print('warnings', len(w))",
        ])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "fake_tqdm"), env.get("PYTHONPATH", "")])
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("before ['MainThread', 'tqdm_monitor']", p.stdout)
        self.assertIn("after ['MainThread']", p.stdout)
        self.assertIn("warnings 0", p.stdout)


if __name__ == "__main__":
    unittest.main()
