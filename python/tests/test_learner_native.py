"""examples/grpo_learner.py's torch learner does the same work before its
first episode natively (--native, the reference of scripts/device-lease.py's
first-step part) as in a clone (the golden's load, smolvm.forkpoint() and the
clone's steps after the fork): the torch calls that set what a step computes
from -- seeds, CPU threads, the base's pool, torch's cache, the warm-up --
in the same order. Shown with the fake torch (python/tests/fake_torch) and
fake transformers/peft below; the training step itself is replaced by one
that records its call (the real one runs on the GPU only).

Regression (H100, 2026-12-07 22:14, episodes.plan's first-step part): every
clone's first-episode losses differed from the native learner's from step 2
on, while the native learner skipped the golden's pool for the base and all
of forkpoint()'s work (cache and cuBLAS workspaces emptied, clone 0's seeds,
threads and warm-up).
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

FAKES = {
    "transformers.py": """
        import torch

        class Qwen2Config:
            def __init__(self, **kw):
                self.__dict__.update(kw)

        class Param:
            requires_grad = False
            def detach(self):
                return self
            def clone(self):
                return self
            def copy_(self, other):
                torch.calls.append(("copy_",))

        class Model:
            def __init__(self, cfg):
                self.config = cfg
            def gradient_checkpointing_enable(self, **kw):
                torch.calls.append(("gradient_checkpointing_enable",))
            def enable_input_require_grads(self):
                pass

        class AutoModelForCausalLM:
            @staticmethod
            def from_config(cfg, **kw):
                torch.cuda._lazy_init()
                torch.cuda._fake_alloc(1 << 20)  # the base's weights
                torch.calls.append(("from_config",))
                return Model(cfg)
        """,
    "peft.py": """
        import torch
        import transformers

        class LoraConfig:
            def __init__(self, **kw):
                pass

        class PeftModel:
            def __init__(self, base):
                self.base = base
                self.lora = transformers.Param()
                self.lora.requires_grad = True
            def parameters(self):
                return [transformers.Param(), self.lora]
            def train(self):
                pass
            def save_pretrained(self, path):
                pass

        def get_peft_model(model, cfg):
            torch.calls.append(("get_peft_model",))
            return PeftModel(model)
        """,
}

PRELUDE = """
import contextlib, io, json, os, sys, types
import torch
torch.bfloat16, torch.float32 = "bfloat16", "float32"
torch.set_default_dtype = lambda dtype: torch.calls.append(("set_default_dtype", dtype))
torch.device = lambda name: contextlib.nullcontext()
torch.no_grad = contextlib.nullcontext
class AdamW:
    def __init__(self, params, **kw):
        self.state = {}
    def zero_grad(self, set_to_none=True):
        pass
torch.optim = types.SimpleNamespace(AdamW=AdamW)
sys.path.insert(0, %(examples)r)
import grpo_learner
grpo_learner.TorchLearner.logps = lambda self, batch, adapters: torch.calls.append(("logps", adapters))
def step(self, batch):
    torch.calls.append(("step", len(batch)))
    return 0.5
grpo_learner.TorchLearner.step = step
grpo_learner.TorchLearner.digest = lambda self: {"adapters": "-", "base": "-"}
EPISODE = {"learner": 0, "iteration": 0, "batch": 2, "groups": [
    {"prompt": "### Q: what is 1+2?\\n### A:", "completions": [" 3", " 4"], "rewards": [1.0, -0.3]}] * 4}
ARGS = ["--config", "qwen2.5-0.5b", "--out", %(out)r]
"""

NATIVE = """
sys.stdin = io.StringIO(json.dumps(EPISODE) + "\\n")
grpo_learner.main(ARGS + ["--native"])
"""

# The golden's main through the real smolvm.forkpoint(): a scripted guest
# library orders one fork, os.fork() says "the child", and the clone takes
# EPISODE as its lease's payload.
CLONE = """
import smolvm
from smolvm import _guest
class Lib:
    def smolvm_fork_wait(self, order): return 0
    def smolvm_fork_prepare(self, order): return 0
    def smolvm_fork_child_attach(self, order): return 0
    def smolvm_fork_child_park(self): return 0
_guest._lib = Lib()
os.fork = lambda: 0
marked = []
smolvm.mark_frozen = lambda address, nbytes: marked.append(address)
payloads = [EPISODE]
smolvm.lease_payload = lambda: payloads.pop(0)
smolvm.next_payload = lambda: payloads.pop(0) if payloads else None
smolvm.reply = lambda result: None
smolvm.complete = lambda result: None
grpo_learner.main(ARGS)
assert marked, "the golden marked its base frozen"
"""


class NativeLearnerDoesTheClonesWorkTest(unittest.TestCase):
    def calls(self, body, extra=()):
        with tempfile.TemporaryDirectory() as d:
            for name, text in FAKES.items():
                with open(os.path.join(d, name), "w") as f:
                    f.write(textwrap.dedent(text))
            script = (PRELUDE % {"examples": os.path.join(ROOT, "examples"), "out": d} + body
                      + "\nprint('CALLS ' + json.dumps(torch.calls))\n")
            env = dict(os.environ, SMOLVM_FORKPOINT_SOCKET="")
            env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), os.path.join(HERE, "fake_torch"), d])
            p = subprocess.run([sys.executable, "-c", script] + list(extra), capture_output=True, text=True,
                               timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        line = [x for x in p.stdout.splitlines() if x.startswith("CALLS ")][-1]
        return [tuple(c) for c in json.loads(line[len("CALLS "):])]

    def test_native_learner_does_a_clones_work_before_and_during_its_first_episode(self):
        native, clone = self.calls(NATIVE), self.calls(CLONE)
        # What a clone does (and the native learner must do too): the base in a
        # pool of its own, forkpoint's emptied cache, clone 0's seeds and threads,
        # the warm-up step, the seeds again, then the episode's 4 steps.
        for want in (("_cuda_beginAllocateToPool", 0, [1, 1]), ("_cuda_clearCublasWorkspaces",), ("empty_cache",),
                     ("set_num_threads", len(os.sched_getaffinity(0)))):
            self.assertIn(want, clone)
        self.assertEqual([c for c in clone if c[0] == "step"], [("step", 2)] * 3, "the warm-up's, the episode's 2")
        self.assertEqual(native, clone)


if __name__ == "__main__":
    unittest.main()
