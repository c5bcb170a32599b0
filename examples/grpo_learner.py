"""The learner of examples/grpo_loop.py: a pool's golden and, forked from it,
each learner the loop keeps across iterations.

The golden loads the base model once (bf16, on the GPU, marked frozen so
every clone shares it read-only), adds LoRA adapters and an AdamW optimizer,
warms up with forward passes (no backward before the fork: docs/torch.md),
then waits at smolvm.forkpoint(). Each clone first warms up while it is
parked (one training step, undone: forkpoint(warmup=...), so its first
episode's first step is as fast as its later ones), then is one learner: it
takes an episode, trains its own adapters on it (DPO, one step per batch of
pairs), replies its losses, and takes the next; when the loop ends the
lease it saves its adapters and completes with their path.

An episode (from the loop): {"learner", "iteration", "batch", "groups":
[{"prompt", "completions", "rewards"}, ...]}. Each group's best and worst
completions (by reward) make one preference pair; `batch` pairs make a step.

  python3 grpo_learner.py --config qwen2.5-0.5b --out /out      # torch, on the GPU
  python3 grpo_learner.py --model DIR --out /out                # a model directory (smolvm-learner make-model)
  python3 grpo_learner.py --stand-in --out /out                 # no torch: see below

--stand-in (or GRPO_STAND_IN=1) swaps the training step for a deterministic
pure-Python one (a "LoRA" of 64 numbers, the same DPO loss and an SGD step
on it) so the loop runs on machines without torch or a GPU (CI); everything
else -- the forkpoint, the episodes, the replies, the adapters' files -- is
the same.

--native runs the learner as a plain process for comparisons
(scripts/device-lease.py), doing a clone's work before its first episode
(smolvm.native_forkpoint: the golden's base in a pool of its own, unmarked;
torch's cache emptied, the seeds, threads and warm-up of clone 0), so that
its episodes train bit-identically to a clone's: "READY {json}" on stdout once loaded, then
episodes as JSON lines on stdin, answers as "ANSWER {json}" lines on stdout;
an empty line (or the end of stdin) ends it (it saves its adapters and
answers with their path).
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

try:
    import smolvm  # in a machine: the machine's package
except ImportError:  # natively: this checkout's
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import smolvm

SEQ = 256  # tokens per row: byte-level, a completion at the end of its row
WARM_BATCH = [("### Q: what is 1+1?\n### A:", " 2", " 3")]  # a pair for warm-ups


def pair_rows(pair, seq):
    """(chosen row, rejected row) as byte strings of `seq` bytes, and where the
    completions start: the prompt left-padded, each completion in the same slot
    at the end, padded with newlines."""
    prompt, chosen, rejected = pair
    slot = max(len(chosen), len(rejected))
    head = prompt[-(seq - slot):].rjust(seq - slot)
    rows = [(head + c + "\n" * (slot - len(c))).encode()[:seq] for c in (chosen, rejected)]
    return rows, seq - slot, (len(chosen), len(rejected))


def pairs_of(episode):
    """One (prompt, chosen, rejected) per group: its best and worst completion."""
    out = []
    for g in episode["groups"]:
        ranked = sorted(zip(g["rewards"], g["completions"]), key=lambda x: x[0])
        out.append((g["prompt"], ranked[-1][1], ranked[0][1]))
    return out


class StandIn:
    """The training step without torch: deterministic, pure Python."""

    def __init__(self, a):
        self.a = a
        self.w = [0.0] * 64  # the "adapter"
        self.steps = 0  # training steps taken, kept across episodes

    def logp(self, row, start):
        return sum(self.w[b % 64] for b in row[start:])

    def step(self, batch):
        beta, grad, loss = self.a.beta, [0.0] * 64, 0.0
        for pair in batch:
            (c, r), start, _ = pair_rows(pair, self.a.seq)
            margin = self.logp(c, start) - self.logp(r, start)
            loss += math.log1p(math.exp(-beta * margin)) / len(batch)
            g = -beta / (1.0 + math.exp(beta * margin)) / len(batch)  # d loss / d margin
            for b in c[start:]:
                grad[b % 64] += g
            for b in r[start:]:
                grad[b % 64] -= g
        self.w = [w - 10.0 * d for w, d in zip(self.w, grad)]  # SGD
        return loss

    def warm_up(self):
        """The torch learner's warm-up, for the same code path: a step, undone."""
        w, steps = list(self.w), self.steps
        self.step(WARM_BATCH)
        self.w, self.steps = w, steps

    def digest(self):
        return {"adapters": hashlib.sha256(json.dumps(self.w).encode()).hexdigest()[:16], "base": "-"}

    def save(self, path):
        with open(path + ".json", "w") as f:
            json.dump({"stand_in_adapter": self.w}, f)
        return path + ".json"


class TorchLearner:
    """The base model (frozen, shared by the clones), LoRA adapters and AdamW."""

    def __init__(self, a):
        import torch
        from peft import LoraConfig, get_peft_model

        self.a, self.torch = a, torch
        self.steps = 0  # training steps taken, kept across episodes
        torch.set_num_threads(1)  # the fork rules: torch's CPU threads at 1 until the fork
        torch.manual_seed(a.seed)
        import smolvm.torch

        # The base in its own allocations, shared read-only by the clones; a
        # native process puts it in the same pool but marks nothing (no shim
        # to mark through), so its allocator holds what the golden's does.
        with smolvm.torch.frozen(mark=not a.native):
            model = self.load_base()
        model.config.use_cache = False
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
        torch.manual_seed(a.seed)  # LoRA A from the seed, whatever loading the base drew
        cfg = LoraConfig(r=16, lora_alpha=16, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        self.model = get_peft_model(model, cfg)
        self.model.train()
        self.opt = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=a.lr,
                                     weight_decay=0.0)
        # The golden's warm-up: forward passes only (a backward before the fork
        # breaks every clone); each clone takes a whole step in warm_up().
        with torch.no_grad():
            self.logps(WARM_BATCH * a.batch, adapters=False)
            self.logps(WARM_BATCH * a.batch, adapters=True)
        torch.cuda.synchronize()

    def load_base(self):
        torch, a = self.torch, self.a
        if a.config:
            from transformers import AutoModelForCausalLM, Qwen2Config

            shapes = {
                "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                     num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                                     tie_word_embeddings=True),
                "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                   num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                   tie_word_embeddings=False),
            }
            cfg = Qwen2Config(max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                              use_cache=False, **shapes[a.config])
            torch.set_default_dtype(torch.bfloat16)
            with torch.device("cuda"):
                model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
            torch.set_default_dtype(torch.float32)
            return model
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16,
                                                    attn_implementation="sdpa").to("cuda")

    def logps(self, batch, adapters):
        """Summed log-probabilities of each row's completion: (chosen..., rejected...)."""
        torch = self.torch
        tokens, rows, cols = [], [], []
        for i, pair in enumerate(batch):
            (c, r), start, lengths = pair_rows(pair, self.a.seq)
            for k, (row, n) in enumerate(zip((c, r), lengths)):
                tokens.append(list(row))
                for j in range(n):  # completion token start + j, predicted at column start + j - 1
                    rows.append(2 * i + k)
                    cols.append(start + j - 1)
        t = torch.tensor(tokens, dtype=torch.long).cuda(non_blocking=True)  # (2B, T)
        idx = torch.tensor([rows, cols], dtype=torch.long).cuda(non_blocking=True)  # (2, S)
        if adapters:
            logits = self.model(input_ids=t).logits  # (2B, T, V)
        else:
            with self.model.disable_adapter():
                logits = self.model(input_ids=t).logits
        lp = torch.log_softmax(logits[idx[0], idx[1]].float(), dim=-1)  # (S, V): the scored positions only
        lp = lp.gather(1, t[idx[0], idx[1] + 1].unsqueeze(1)).squeeze(1)  # (S)
        out = torch.zeros(t.shape[0], device=lp.device, dtype=lp.dtype).index_add(0, idx[0], lp)
        return out[0::2], out[1::2]

    def step(self, batch):
        torch = self.torch
        with torch.no_grad():
            ref_c, ref_r = self.logps(batch, adapters=False)
        pol_c, pol_r = self.logps(batch, adapters=True)
        margin = (pol_c - ref_c) - (pol_r - ref_r)
        loss = -torch.nn.functional.logsigmoid(self.a.beta * margin).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()  # one sync per step

    def warm_up(self):
        """In each clone before it parks (smolvm.forkpoint(warmup=...)): one
        training step on a dummy batch -- the kernels the golden never ran
        (backward, AdamW), cuBLAS/cuDNN handles, the optimizer's state and the
        allocator's blocks, all made ahead of the first episode -- then the
        adapters and the optimizer put back as they were: the first episode
        trains exactly as without it."""
        torch = self.torch
        params = [p for p in self.model.parameters() if p.requires_grad]
        saved = [p.detach().clone() for p in params]
        steps = self.steps
        self.step(WARM_BATCH * self.a.batch)
        with torch.no_grad():
            for p, s in zip(params, saved):
                p.copy_(s)
        self.opt.state.clear()  # AdamW's moments and step count: made again at the first step
        self.opt.zero_grad(set_to_none=True)
        self.steps = steps
        del saved
        torch.cuda.synchronize()

    def digest(self):
        """{"adapters", "base"}: sums of the weights' bits (on the GPU, one
        sync), equal wherever the weights are bit-identical: whether a clone
        and a native learner start (and leave a step) from the same weights."""
        torch = self.torch
        sums = {True: torch.zeros((), dtype=torch.int64, device="cuda"),
                False: torch.zeros((), dtype=torch.int64, device="cuda")}
        views = {2: torch.int16, 4: torch.int32, 8: torch.int64}
        with torch.no_grad():
            for p in self.model.parameters():
                bits = p.detach().reshape(-1).view(views[p.element_size()])
                for i in range(0, bits.numel(), 1 << 24):  # int64 temporaries of 128 MiB at most
                    sums[p.requires_grad] += bits[i:i + (1 << 24)].sum(dtype=torch.int64)
        return {"adapters": "%x" % (sums[True].item() & (2**64 - 1)), "base": "%x" % (sums[False].item() & (2**64 - 1))}

    def save(self, path):
        self.model.save_pretrained(path)
        return path


def train_episode(learner, episode, a):
    """One episode: its pairs in batches, one training step each."""
    pairs = pairs_of(episode)
    batch = int(episode.get("batch", a.batch))
    losses, step_s = [], []
    # The first episode says what weights it started from and what its first
    # step left (digests): where a clone's losses differ from a native
    # learner's, whether the weights or the step's arithmetic did.
    digest = {"before": learner.digest()} if learner.steps == 0 else None
    t0 = time.monotonic()
    for i in range(0, len(pairs) - batch + 1, batch):
        ts = time.monotonic()
        losses.append(learner.step(pairs[i:i + batch]))
        step_s.append(time.monotonic() - ts)
        learner.steps += 1
        if digest is not None and len(losses) == 1:
            digest["after_first_step"] = learner.digest()
    train_s = time.monotonic() - t0
    return {"learner": episode.get("learner"), "iteration": episode.get("iteration"), "losses": losses,
            "digest": digest,
            "tokens": len(step_s) * batch * a.seq, "train_s": train_s, "step_s": step_s,
            "steps_total": learner.steps, "pid": os.getpid(), "machine": os.environ.get("SMOLVM_FORK_NAME", "")}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=["qwen2.5-0.5b", "qwen2.5-7b"], help="random weights of this shape")
    ap.add_argument("--model", help="a model directory (smolvm-learner make-model writes one)")
    ap.add_argument("--stand-in", action="store_true", default=os.environ.get("GRPO_STAND_IN") == "1",
                    help="the pure-Python training step (no torch)")
    ap.add_argument("--native", action="store_true", help="a plain process: episodes on stdin")
    ap.add_argument("--out", default="/tmp", help="where adapters are saved")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=SEQ)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-warmup", action="store_true", help="clones park without their warm-up step")
    a = ap.parse_args(argv)
    if not a.stand_in and bool(a.config) == bool(a.model):
        ap.error("give --config NAME or --model DIR (or --stand-in)")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    t_load = time.monotonic()
    learner = StandIn(a) if a.stand_in else TorchLearner(a)
    load_s = time.monotonic() - t_load
    # Each clone takes a training step, undone, before it parks: its first
    # episode's first step is as fast as its later ones.
    warmup = None if a.no_warmup else learner.warm_up
    if a.native:  # what a clone does before its first episode, in this process: clone 0's work
        smolvm.native_forkpoint(0, seed=a.seed, warmup=warmup)
        return serve_stdin(learner, a, load_s)
    idx = smolvm.forkpoint(seed=a.seed, warmup=warmup)
    if idx is None:  # the golden, released: its pool was deleted
        return 0
    episode = smolvm.lease_payload()
    name = None
    while episode is not None:
        name = "learner-%s" % episode.get("learner", idx)
        smolvm.reply(dict(train_episode(learner, episode, a), load_s=load_s, fork=smolvm.fork_timing()))
        episode = smolvm.next_payload()
    smolvm.complete({"adapter": learner.save(os.path.join(a.out, name or "learner-clone-%d" % idx))})
    return 0


def serve_stdin(learner, a, load_s):
    name = "learner-native-%d" % os.getpid()
    print("READY " + json.dumps({"load_s": load_s}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        episode = json.loads(line)
        name = "learner-%s" % episode.get("learner", name)
        print("ANSWER " + json.dumps(dict(train_episode(learner, episode, a), load_s=load_s)), flush=True)
    print("ANSWER " + json.dumps({"adapter": learner.save(os.path.join(a.out, name))}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
