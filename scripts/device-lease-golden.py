"""The golden of scripts/device-lease.py's lease-latency rounds (issue 32,
must-show 2): a Qwen2 model of qwen2.5-0.5b's shape (random weights from its
config: no hub here) loaded once on the GPU under smolvm.torch.frozen(), a
forward pass, torch's cache emptied, then the forkpoint (its pool forks with
share "on": the clones share the frozen base). A leased clone notes the wall-clock time
its user code runs (right after forkpoint() returns) and completes with it at
once: the lease's latency is that time less the loop's request time (one
host, one clock).

  python3 device-lease-golden.py            # torch, on the GPU
  python3 device-lease-golden.py --no-torch # rehearsal without torch (BACKEND=fake)
"""

import os
import sys
import time

import smolvm

if "--no-torch" not in sys.argv:
    import torch

    import smolvm.torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(1)  # the fork rules: torch's CPU threads at 1 until the fork
    cfg = Qwen2Config(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                      num_key_value_heads=2, vocab_size=151936, max_position_embeddings=2048, tie_word_embeddings=True)
    torch.manual_seed(0)
    with smolvm.torch.frozen():
        model = Qwen2ForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    with torch.no_grad():
        model(torch.arange(64, device="cuda").unsqueeze(0))
    torch.cuda.synchronize()
    # What each clone copies is what the golden holds outside the frozen base:
    # torch's cache of the forward's freed activations too, unless emptied. A
    # leased clone here runs no CUDA work, so the emptied cache changes
    # nothing it measures; it only lets more clones fit the card.
    torch.cuda.empty_cache()
    for line in smolvm.torch.memory_report():
        print("golden memory: " + line, flush=True)
print("golden ready", flush=True)

idx = smolvm.forkpoint(seed=0)
running_at = time.time()  # the clone's user code runs
if idx is None:
    sys.exit(0)
work = smolvm.lease_payload()
smolvm.complete({"idx": idx, "running_at": running_at, "i": work.get("i"), "pid": os.getpid(),
                 "fork": smolvm.fork_timing()})
