"""One probe of what the shims do not support, in its own process (suite.py
runs each so): probes.py NAME with NAME cuda_graph | torch_compile | nccl.
Prints `PROBE name ok|error seconds [what]`; natively each passes. Through
the shims CUDA graphs and NCCL must fail at once, naming what is not
supported on stderr, never hang; torch.compile is meant to run
(scripts/device-torch-compile.sh checks its outputs against native)."""
import os
import sys
import time

import torch

dev = "cuda"


def probe(name, fn):
    """One probe, timed: ok, or the error it raised (never a hang)."""
    t = time.perf_counter()
    try:
        fn()
        print(f"PROBE {name} ok {time.perf_counter() - t:.1f}s", flush=True)
    except Exception as e:
        msg = " ".join(str(e).split())[:300]
        print(f"PROBE {name} error {time.perf_counter() - t:.1f}s {type(e).__name__}: {msg}", flush=True)


def cuda_graph():
    s = torch.cuda.Stream()
    x = torch.ones(1024, device=dev)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 2  # warm-up outside the capture, as torch's docs do
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 3
    g.replay()
    torch.cuda.synchronize()
    assert float(y.sum()) == 3 * 1024


def compiled():
    f = torch.compile(lambda a: torch.sin(a) * 2 + 1)
    a = torch.randn(4096, device=dev)
    assert torch.allclose(f(a), torch.sin(a) * 2 + 1)


def nccl():
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        t = torch.ones(16, device=dev)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        assert float(t.sum()) == 16
    finally:
        dist.destroy_process_group()




if __name__ == "__main__":
    fns = {"cuda_graph": cuda_graph, "torch_compile": compiled, "nccl": nccl}
    if len(sys.argv) != 2 or sys.argv[1] not in fns:
        sys.exit(f"usage: probes.py {'|'.join(fns)}")
    probe(sys.argv[1], fns[sys.argv[1]])
