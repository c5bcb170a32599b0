#!/usr/bin/env python3
"""The peer for smolvm-learner's side-by-side: PyTorch + transformers + PEFT.

Same model directory, same LoRA (r, alpha, q/k/v/o/gate/up/down, B = 0 at
init), same DPO loss written in torch (trl is not installed): reference =
the same base with adapters disabled, summed completion log-probs,
-logsigmoid(beta * margin). bf16 weights, gradient checkpointing on, AdamW.
Rows are exactly --maxseq byte tokens (arithmetic history + question +
completion), as smolvm-learner's data.

Prints one JSON line: tok_s (steps*batch*maxseq/train_s over all steps, the
learner's definition), tok_s_warm (excluding --warmup steps), step_ms,
peak_gb (torch.cuda.max_memory_allocated, GiB), load_s, losses.
"""
import argparse
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
    ap.add_argument("--model", required=True)
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
    for step in range(a.steps):
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
    train_s = sum(step_ms) / 1e3
    warm = step_ms[a.warmup:] if a.steps > a.warmup else step_ms
    res = {
        "impl": "peft",
        "model": a.model,
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
        "torch": torch.__version__,
    }
    line = json.dumps(res)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
