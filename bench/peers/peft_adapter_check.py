#!/usr/bin/env python3
"""Loads an adapter written by `smolvm-learner train --save-adapter DIR` with
PEFT's PeftModel.from_pretrained and compares the logits of base+adapter on
the tokens the learner dumped (`--dump-logits FILE`) with the learner's own.

Passes when max |ours - peft| <= tol, where tol is a bf16 tolerance scaled by
the logits' magnitude, and the adapter visibly changes the logits (so a
silently ignored adapter cannot pass). Prints one JSON line.
"""
import argparse
import json
import sys

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--logits", required=True, help="safetensors from --dump-logits")
    ap.add_argument("--out")
    a = ap.parse_args()

    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    ours = load_file(a.logits)
    tokens = ours["tokens"].long().cuda()
    our_logits = ours["logits"].float().cuda()[0]  # (T, V)
    try:
        base = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).cuda()
    except TypeError:
        base = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16).cuda()
    model = PeftModel.from_pretrained(base, a.adapter).cuda().eval()
    with torch.no_grad():
        peft_logits = model(input_ids=tokens).logits.float()[0]
        with model.disable_adapter():
            base_logits = model(input_ids=tokens).logits.float()[0]
    diff = (our_logits - peft_logits).abs()
    scale = peft_logits.abs().max().item()
    adapter_effect = (peft_logits - base_logits).abs().max().item()
    tol = 0.02 * scale + 0.02
    res = {
        "max_abs_diff": diff.max().item(),
        "mean_abs_diff": diff.mean().item(),
        "logit_scale": scale,
        "adapter_effect_max": adapter_effect,
        "tol": tol,
        "argmax_agree": (our_logits.argmax(-1) == peft_logits.argmax(-1)).float().mean().item(),
        "pass": diff.max().item() <= tol and adapter_effect > diff.max().item(),
    }
    line = json.dumps(res)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
