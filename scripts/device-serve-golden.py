"""The torch golden of scripts/device-serve.sh (issue 31, must-show 2): a
Qwen2 model of qwen2.5-0.5b's shape (random weights from its config: no hub
here) loaded once on the GPU under smolvm.torch.frozen(), then parked at the
forkpoint. Each leased clone runs a forward pass over its payload's tokens
and completes with what it computed and the memory it holds."""

import os
import sys

import torch

import smolvm
import smolvm.torch
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.set_num_threads(1)  # the fork rules: torch's CPU threads at 1 until the fork
cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=2048, tie_word_embeddings=True)
torch.manual_seed(0)
with smolvm.torch.frozen():
    model = Qwen2ForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
params = sum(p.numel() for p in model.parameters())
print("golden ready params=%d allocated_mib=%d" % (params, torch.cuda.memory_allocated() >> 20), flush=True)

idx = smolvm.forkpoint(seed=0)
if idx is None:
    sys.exit(0)
work = smolvm.lease_payload()
tokens = torch.tensor([work["tokens"]], device="cuda")
with torch.no_grad():
    logits = model(tokens).logits.float()
torch.cuda.synchronize()
smolvm.complete({"idx": idx, "round": work.get("round"), "member": work.get("member"),
                 "logit_sum": float(logits.sum()), "argmax": int(logits[0, -1].argmax()),
                 "params": params, "allocated_mib": torch.cuda.memory_allocated() >> 20, "pid": os.getpid()})
