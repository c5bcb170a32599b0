#!/usr/bin/env python3
"""The peer for smolvm-learner's side-by-side: PyTorch + transformers + PEFT.

Same model directory, same LoRA (r, alpha, q/k/v/o/gate/up/down, B = 0 at
init), same DPO loss written in torch (trl is not installed): reference =
the same base with adapters disabled, summed completion log-probs,
-logsigmoid(beta * margin). bf16 weights, gradient checkpointing on, AdamW.
Rows are exactly --maxseq byte tokens (arithmetic history + question +
completion), as smolvm-learner's data.

The model is a directory (--model, from_pretrained) or, with --config, built
from a config of Qwen2.5-0.5B's or 7B's shapes with seeded random weights,
initialised on the GPU (no files, no model hub: the form
scripts/device-torch-dpo.sh runs natively and through the shims).

Prints one JSON line: tok_s (steps*batch*maxseq/train_s over all steps, the
learner's definition), tok_s_warm (excluding --warmup steps), step_ms,
peak_gb (torch.cuda.max_memory_allocated, GiB), load_s, losses and
losses_hex (float.hex, for bit-for-bit comparison). Through the smolvm
shims (their libcudart exports smolvm_shim_op_counts) also shim_round_trips:
the SYNC ops (each a round trip to the worker) per warm step, all and by op.
"""
import argparse
import ctypes
import json
import random
import sys
import time

import torch
import torch.nn.functional as F


def question(a, b):
    return f"### Q: what is {a}+{b}?\n### A:"


def make_pool(seed, n=16):
    rng = random.Random(seed)
    pool = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        d = rng.choice([-2, -1, 1, 2, 3])
        if a + b + d < 0:
            d = -d
        hist = ""
        while len(hist) < 4096:
            x, y = rng.randint(0, 99), rng.randint(0, 99)
            hist += question(x, y) + f" {x + y}\n"
        pool.append((question(a, b), f" {a + b}", f" {a + b + d}", hist))
    return pool


def row(hist, text, seq):
    need = seq - len(text)
    left = hist[-need:] if len(hist) >= need else " " * (need - len(hist)) + hist
    return list((left + text).encode())


def batches(seed, batch, seq):
    pool = make_pool(seed)
    rng = random.Random(seed + 1)
    while True:
        order = list(range(len(pool)))
        rng.shuffle(order)
        for i in range(0, len(order) - batch + 1, batch):
            pairs = [pool[j] for j in order[i:i + batch]]
            toks = [row(h, p + c, seq) for p, c, r, h in pairs] + [row(h, p + r, seq) for p, c, r, h in pairs]
            comp = [len(c) for p, c, r, h in pairs] + [len(r) for p, c, r, h in pairs]
            yield torch.tensor(toks, dtype=torch.long), comp


# Shapes of the released checkpoints (their config.json); weights random.
CONFIGS = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}


def build_from_config(name):
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, hidden_act="silu",
                      use_cache=False, **CONFIGS[name])
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.bfloat16)  # initialised in bf16 (else fp32, then cast)
    except (TypeError, RuntimeError):
        pass
    try:
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(old)
    return model.to(torch.bfloat16)


class ShimCounters:
    """The smolvm cudart shim's per-op counters (absent natively)."""

    SLOTS = 1024

    def __init__(self):
        try:
            lib = ctypes.CDLL(None)
            self.fn = lib.smolvm_shim_op_counts
            self.name = lib.smolvm_shim_op_name
        except (OSError, AttributeError):
            self.fn = None
            return
        self.fn.restype = ctypes.c_size_t
        self.fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.name.restype = ctypes.c_char_p
        self.name.argtypes = [ctypes.c_uint32]

    def read(self):
        """(round trips by op, queued ops by op) as lists, or None natively."""
        if self.fn is None:
            return None
        sync = (ctypes.c_uint64 * self.SLOTS)()
        queued = (ctypes.c_uint64 * self.SLOTS)()
        n = min(self.fn(sync, queued, self.SLOTS), self.SLOTS)
        return list(sync[:n]), list(queued[:n])

    def per_step(self, a, b, steps):
        if a is None or b is None or steps <= 0:
            return None
        by_op = {}
        for op, (x, y) in enumerate(zip(a[0], b[0])):
            if y > x:
                by_op[self.name(op).decode()] = round((y - x) / steps, 2)
        queued = sum(b[1]) - sum(a[1])
        return {"per_step": round(sum(by_op.values()), 2), "queued_per_step": round(queued / steps, 1),
                "by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1]))}


def completion_logps(model, tokens, comp, keep):
    """Sum of log p(completion tokens) per row. keep='all' computes every
    position's logits (trl's default); 'completion' asks the model for only
    the last max(comp)+1 positions (logits_to_keep)."""
    T = tokens.shape[1]
    if keep == "completion":
        k = max(comp) + 1
        logits = model(input_ids=tokens, logits_to_keep=k).logits  # (R, k, V)
        start = T - k
    else:
        logits = model(input_ids=tokens).logits  # (R, T, V)
        start = 0
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    tgt = tokens[:, start + 1:]
    lp = torch.gather(logp, 2, tgt.unsqueeze(-1)).squeeze(-1)  # (R, L-1)
    mask = torch.zeros_like(lp)
    for i, c in enumerate(comp):
        mask[i, lp.shape[1] - c:] = 1
    return (lp * mask).sum(-1)


def main():
    ap = argparse.ArgumentParser()
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a model directory (from_pretrained)")
    src.add_argument("--config", choices=sorted(CONFIGS), help="random weights of this shape, built on the GPU")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--maxseq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=16)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-logits", choices=["all", "completion"], default="all")
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(a.seed)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    if a.config:
        model = build_from_config(a.config)
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16)
        except TypeError:
            model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16)
        model = model.cuda()
    model.config.use_cache = False
    if not a.no_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    cfg = LoraConfig(r=a.lora_r, lora_alpha=a.lora_alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, cfg)
    model.train()
    torch.cuda.synchronize()
    load_s = time.time() - t0
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    data = batches(a.seed, a.batch, a.maxseq)
    losses, step_ms = [], []
    counters = ShimCounters()
    warm_counts = None
    for step in range(a.steps):
        if step == a.warmup:
            warm_counts = counters.read()
        ts = time.time()
        tokens, comp = next(data)
        tokens = tokens.cuda(non_blocking=True)
        with torch.no_grad(), model.disable_adapter():
            ref = completion_logps(model, tokens, comp, a.keep_logits)
        pol = completion_logps(model, tokens, comp, a.keep_logits)
        n = a.batch
        margin = (pol[:n] - ref[:n]) - (pol[n:] - ref[n:])
        loss = -F.logsigmoid(a.beta * margin).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # syncs, like the learner's per-step loss read-back
        step_ms.append((time.time() - ts) * 1e3)
    round_trips = counters.per_step(warm_counts, counters.read(), a.steps - a.warmup)
    train_s = sum(step_ms) / 1e3
    warm = step_ms[a.warmup:] if a.steps > a.warmup else step_ms
    res = {
        "impl": "peft",
        "model": a.model or a.config,
        "batch": a.batch,
        "maxseq": a.maxseq,
        "steps": a.steps,
        "keep_logits": a.keep_logits,
        "checkpointing": not a.no_checkpointing,
        "tok_s": a.steps * a.batch * a.maxseq / train_s,
        "tok_s_warm": len(warm) * a.batch * a.maxseq / (sum(warm) / 1e3),
        "train_s": train_s,
        "step_ms": train_s * 1e3 / a.steps,
        "step_ms_warm": sum(warm) / len(warm),
        "peak_gb": torch.cuda.max_memory_allocated() / 2**30,
        "load_s": load_s,
        "loss0": losses[0],
        "lossN": losses[-1],
        "losses": losses,
        "losses_hex": [x.hex() for x in losses],
        "shim_round_trips": round_trips,
        "torch": torch.__version__,
    }
    line = json.dumps(res)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
