"""A GRPO-style loop over smolvm serve: K learners forked from one base model,
kept across iterations. Each iteration the loop makes every learner its own
episode -- prompts, a group of candidate completions per prompt and their
rewards -- sends them, and aggregates the learners' losses; each learner
(examples/grpo_learner.py) trains its own LoRA adapters on its episode,
keeping them and its optimizer between iterations. Learners can be dropped
and added between iterations (--drop-at, --add-at). At the end each learner
saves its adapters and the loop prints their paths.

  smolvm serve &                                      # as root (docs/serve.md)
  python3 examples/grpo_loop.py --learners 16 --iterations 10 --config qwen2.5-0.5b \\
      --python /opt/torch/.venv/bin/python3           # torch on the GPU
  python3 examples/grpo_loop.py --learners 4 --iterations 3 --stand-in   # no torch, no GPU

The candidates stand in for the policy's rollouts (generation is not what
this example is about): each prompt asks for a sum, the right answer and
near misses are the group, and the reward is the verifier's (1 for the
right sum, less the further off). A group's best and worst completions make
a DPO pair; 2 pairs a step, 8 steps an episode (DPO, 2 x 256 tokens).

Prints one line per iteration and, last, a JSON summary (tokens/s of the
whole loop and per iteration; --json FILE writes it too).
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))  # the smolvm package of this checkout
import smolvm  # noqa: E402


def make_episode(learner, iteration, seed=0, steps=8, batch=2, group=4):
    """Learner `learner`'s episode of iteration `iteration`: steps x batch groups."""
    rng = random.Random("%d/%d/%d" % (seed, learner, iteration))
    groups = []
    for _ in range(steps * batch):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        offsets = [0] + rng.sample([-3, -2, -1, 1, 2, 3], group - 1)
        groups.append({"prompt": "### Q: what is %d+%d?\n### A:" % (a, b),
                       "completions": [" %d" % (a + b + d) for d in offsets],
                       "rewards": [1.0 if d == 0 else -abs(d) / 3.0 for d in offsets]})
    return {"learner": learner, "iteration": iteration, "batch": batch, "groups": groups}


def golden_of(a, out):
    """The pool's golden: the learner program, loaded once and forked."""
    cmd = [a.python, "/example/grpo_learner.py", "--out", "/out"]
    volumes = [HERE + ":/example:ro", out + ":/out"]
    if a.stand_in:
        cmd.append("--stand-in")
    elif a.config:
        cmd += ["--config", a.config]
    else:
        cmd += ["--model", "/model"]
        volumes.append(os.path.abspath(a.model) + ":/model:ro")
    if a.no_warmup:
        cmd.append("--no-warmup")
    prefix = os.path.dirname(os.path.dirname(a.python))  # a venv's python: its tree, read-only
    if prefix not in ("/usr", "/"):
        volumes.append(prefix + ":" + prefix + ":ro")
    env = {"PYTHONUNBUFFERED": "1"}
    if os.environ.get("SMOLVM_SHIM_ERRORS"):  # debugging: the shim names each failing CUDA call (docs/shim.md)
        env["SMOLVM_SHIM_ERRORS"] = os.environ["SMOLVM_SHIM_ERRORS"]
    return dict(cmd=cmd, volumes=volumes, cuda=not a.stand_in, env=env)


def share_of(a):
    """The pool's share mode: the torch learner loads its base inside
    smolvm.torch.frozen(), so its clones share it read-only ("on") and copy
    only their own state (LoRA, optimizer, torch's cache); without "on" each
    clone would copy the whole base. The stand-in has no GPU memory."""
    return "off" if a.stand_in else "on"


def run(a):
    out = a.out or tempfile.mkdtemp(prefix="grpo-adapters-")
    os.chmod(out, 0o777)  # the clones write their adapters here (their root is no host root)
    client = smolvm.Client(a.socket)
    extra = 1 if a.add_at is not None else 0
    pool = client.create_pool(a.pool, golden=golden_of(a, out), min_ready=a.learners + extra, share=share_of(a),
                              cpus=a.cpus, ttl_s=a.ttl)
    summary = {"learners": a.learners, "iterations": a.iterations, "stand_in": a.stand_in,
               "model": a.config or a.model, "per_iteration": []}
    t0 = time.monotonic()
    said = t0
    try:
        while pool.ready < a.learners + extra:  # the golden loads, the pool forks (and warms up) its clones
            if time.monotonic() - t0 > a.ready_timeout:
                raise RuntimeError("pool %s not ready after %ss: %s" % (a.pool, a.ready_timeout, pool.info))
            if time.monotonic() - said >= 10:  # serve's own words for where the pool stands
                info = pool.info
                print("waiting for pool %s: %d of %d ready, %d forking; %s" % (
                    a.pool, info["ready"], a.learners + extra, info["forking"], info.get("detail") or "no failure"),
                    flush=True)
                said = time.monotonic()
            time.sleep(0.2)
        summary["pool_ready_s"] = round(time.monotonic() - t0, 2)
        t_loop = time.monotonic()
        tokens = 0
        with pool.lease(a.learners, payloads=[make_episode(i, 0, a.seed) for i in range(a.learners)],
                        wait=a.ready_timeout) as lease:
            for it in range(a.iterations):
                last = summary["per_iteration"][-1]["seconds"] if it else 0
                if a.max_seconds and it > 0 and time.monotonic() - t0 + last > a.max_seconds:
                    print("stopping after %d iterations: --max-seconds %s" % (it, a.max_seconds), flush=True)
                    break
                t_it = time.monotonic()
                if it > 0:
                    if it == a.drop_at:
                        lease.drop(lease.learners[-1])  # the last learner goes
                    if it == a.add_at:
                        lease.add(1, wait=a.ready_timeout)  # one more, from the pool's parked clones
                    lease.send(payloads=[make_episode(i, it, a.seed) for i in lease.learners])
                answers = lease.results(timeout=a.episode_timeout)
                dt = time.monotonic() - t_it
                n = sum(x["tokens"] for x in answers)
                tokens += n
                row = {"iteration": it, "learners": [x["learner"] for x in answers],
                       "steps_total": [x["steps_total"] for x in answers], "machines": [x["machine"] for x in answers],
                       "mean_loss": sum(x["losses"][-1] for x in answers) / len(answers),
                       "last_losses": [x["losses"][-1] for x in answers],
                       "tokens": n, "seconds": round(dt, 3), "tok_s": round(n / dt, 1),
                       "first_step_s": [round(x["step_s"][0], 4) for x in answers] if it == 0 else None,
                       "warmup_ms": [round(x["fork"].get("warmup_ms", 0), 1) for x in answers] if it == 0 else None}
                summary["per_iteration"].append(row)
                print("iteration %d: %d learners %s, mean last loss %.4f, %.0f tok/s" % (
                    it, len(answers), row["learners"], row["mean_loss"], row["tok_s"]), flush=True)
            summary["iterations_done"] = len(summary["per_iteration"])
            summary["loop_s"] = round(time.monotonic() - t_loop, 3)
            summary["tok_s"] = round(tokens / summary["loop_s"], 1)
            # Each learner's adapters, as the host sees them (the clones wrote /out/...).
            summary["adapters"] = [os.path.join(out, os.path.basename(r["adapter"]))
                                   for r in lease.finish(timeout=a.episode_timeout)]
        summary["adapters_dir"] = out
    finally:
        if not a.keep_pool:
            pool.delete()
    print(json.dumps(summary), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    return summary


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", type=int, default=4, help="K learners kept across iterations")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--config", choices=["qwen2.5-0.5b", "qwen2.5-7b"], help="random weights of this shape")
    ap.add_argument("--model", help="a model directory (smolvm-learner make-model writes one)")
    ap.add_argument("--stand-in", action="store_true", help="the learners' pure-Python training step (no torch)")
    ap.add_argument("--python", default="/usr/bin/python3", help="the learners' interpreter (torch's venv)")
    ap.add_argument("--drop-at", type=int, help="drop the last learner before this iteration")
    ap.add_argument("--add-at", type=int, help="add a learner before this iteration")
    ap.add_argument("--out", help="a host directory for the adapters (default: a new temporary one)")
    ap.add_argument("--pool", default="grpo")
    ap.add_argument("--socket", help="serve's socket (default: $SMOLVM_HOME/serve.sock)")
    ap.add_argument("--cpus", type=float, default=1)
    ap.add_argument("--ttl", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ready-timeout", type=float, default=600)
    ap.add_argument("--episode-timeout", type=float, default=600)
    ap.add_argument("--no-warmup", action="store_true", help="the learners park without their warm-up step")
    ap.add_argument("--max-seconds", type=float,
                    help="start no iteration that would end past this many seconds from the start (pool included)")
    ap.add_argument("--keep-pool", action="store_true")
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args(argv)
    if not a.stand_in and bool(a.config) == bool(a.model):
        ap.error("give --config NAME or --model DIR (or --stand-in)")
    return a


if __name__ == "__main__":
    run(parse_args())
