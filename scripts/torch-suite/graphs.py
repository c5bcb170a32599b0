#!/usr/bin/env python3
"""CUDA graphs in torch (issue 33): torch.cuda.graphs capture/replay and
torch.compile(mode="reduce-overhead") natively or through the shims (the same
script; the caller sets the environment), on two models: `small` (an fp32
MLP, 1024 wide, 4 layers, batch 64: steps of 0.1-0.5 ms, where the fixed cost
of a round trip shows) and `large` (bf16, 4096 wide, 8 layers, batch 2048:
steps of a few ms, the GPU's share dominating). The small model's parts keep
their names; the large model's end in `_large`.

Parts, each printing
  RESULT <part> <sha256 of its outputs>   bit-identical natively and through the shims
  TIME <part> <ms>    median step time, synchronized before and after each step
                      (the latency of one step)
  B2B <part> <ms>     step time of N steps back to back, one synchronization at
                      the end (the throughput a training loop sees), median of 3
  OPS <part> <round trips> <queued> <by op>   through the shims only: what one
                      step costs on the wire, counted over the back-to-back
                      steps (smolvm.shim_ops); TIME adds one synchronization
                      (a CtxSynchronize round trip) per step
Parts:
  forward      a CUDAGraph of the model's forward, replayed on fresh inputs
  compiled     torch.compile(mode="reduce-overhead") of the forward (Inductor's
               cudagraph trees), called on fresh inputs
  train        a CUDAGraph of a whole training step (forward, backward, SGD),
               replayed on fresh batches
  train_compiled  a reduce-overhead compiled training step

--fork: the golden runs forward and compiled (no backward before a fork,
docs/torch.md), waits in smolvm.forkpoint(); each clone replays the
golden's forward graph and compiled function (captured in the golden) and
then captures and replays its own training graphs. Lines are prefixed with
`golden` or `clone<i>` and each process writes them to --out DIR/<who>.txt.
--sizes small,large picks the models (--fork: small only, by default).
"""
import argparse
import hashlib
import os
import statistics
import sys
import time

import torch

try:  # on PYTHONPATH through the shims (python/); natively there are no counters
    from smolvm import shim_ops
except ImportError:
    shim_ops = None

# name: (hidden, layers, batch, dtype, part suffix, steps timed, steps back to back)
SIZES = {
    "small": (1024, 4, 64, torch.float32, "", 50, 50),
    "large": (4096, 8, 2048, torch.bfloat16, "_large", 20, 20),
}


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach()
        # bf16 by its bits (numpy has no bf16; a float copy would be twice the bytes)
        t = t.contiguous().view(torch.int16) if t.dtype == torch.bfloat16 else t.float()
        h.update(t.cpu().numpy().tobytes())
    return h.hexdigest()[:24]


def model_and_data(seed, size):
    hidden, layers_n, batch, dtype = SIZES[size][:4]
    g = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(layers_n):
        layers += [torch.nn.Linear(hidden, hidden), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).cuda().to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    batches = [torch.randn(batch, hidden, generator=g).to("cuda", dtype) for _ in range(12)]
    targets = [torch.randn(batch, hidden, generator=g).to("cuda", dtype) for _ in range(12)]
    return model, batches, targets


class Timing:
    """A part's step time both ways, and its ops on the wire."""

    def __init__(self, fn, size):
        n_synced, n_b2b = SIZES[size][5:7]
        times = []
        for _ in range(n_synced):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1e3)
        self.synced_ms = statistics.median(times)
        runs = []
        self.ops = None
        for _ in range(3):
            torch.cuda.synchronize()
            before = shim_ops.read() if shim_ops else None
            t0 = time.perf_counter()
            for _ in range(n_b2b):
                fn()
            t1 = time.perf_counter()
            after = shim_ops.read() if shim_ops else None  # not timed
            t2 = time.perf_counter()
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - t0 - (t2 - t1)) * 1e3 / n_b2b)
            self.ops = shim_ops.per_step(before, after, n_b2b) if shim_ops else None
        self.b2b_ms = statistics.median(runs)

    def lines(self, part, digest):
        out = [f"RESULT {part} {digest}", f"TIME {part} {self.synced_ms:.3f}", f"B2B {part} {self.b2b_ms:.3f}"]
        if self.ops is not None:
            by_op = ",".join(f"{k}={v[0]:g}/{v[1]:g}" for k, v in self.ops["by_op"].items())
            out.append(f"OPS {part} {self.ops['round_trips']:g} {self.ops['queued']:g} {by_op or '-'}")
        return out


class Forward:
    """A CUDAGraph of model(x) with a static input."""

    def __init__(self, model, example):
        self.x = example.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                model(self.x)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            self.y = model(self.x)

    def __call__(self, x):
        self.x.copy_(x)
        self.graph.replay()
        return self.y.clone()


def part_forward(fwd, batches, size):
    outs = [fwd(b) for b in batches]
    return digest(outs), Timing(lambda: fwd(batches[0]), size)


def part_compiled(compiled, batches, size):
    with torch.no_grad():
        outs = [compiled(b).clone() for b in batches]
        timing = Timing(lambda: compiled(batches[0]), size)
    return digest(outs), timing


def part_train(model, batches, targets, size):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sx, sy = batches[0].clone(), targets[0].clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(sx), sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = torch.nn.functional.mse_loss(model(sx), sy)
        loss.backward()
        opt.step()
    losses = []
    for x, y in zip(batches, targets):
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        losses.append(loss.clone())
    d = digest(losses + [p for p in model.parameters()])
    return d, Timing(g.replay, size)


def part_train_compiled(model, batches, targets, size):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @torch.compile(mode="reduce-overhead")
    def step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    def run(x, y):
        # Each call replays the graphs over the last call's outputs (the
        # grads among them): a new step, and grads made afresh, as torch's
        # reduce-overhead documentation asks.
        torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        return step(x, y)

    losses = []
    for x, y in zip(batches, targets):
        losses.append(run(x, y).clone())
        opt.step()
    d = digest(losses + [p for p in model.parameters()])
    return d, Timing(lambda: run(batches[0], targets[0]), size)


def report(lines, who, out):
    text = "".join(f"{who + ' ' if who else ''}{l}\n" for l in lines)
    sys.stdout.write(text)
    sys.stdout.flush()
    if out:
        with open(os.path.join(out, f"{who or 'run'}.txt"), "w") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fork", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--sizes", default="", help="comma-separated of: " + ", ".join(SIZES))
    args = ap.parse_args()
    sizes = [s for s in (args.sizes or ("small" if args.fork else "small,large")).split(",") if s]
    for size in sizes:
        if size not in SIZES:
            ap.error(f"--sizes: no model named {size!r} (known: {', '.join(SIZES)})")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.fork:
        torch.set_num_threads(1)  # until the fork (docs/torch.md)
    lines = []
    # Forward graphs of every size first: the golden captures them before the
    # fork (no backward before it, docs/torch.md).
    forwards = {}
    for size in sizes:
        model, batches, _ = model_and_data(1234, size)
        sfx = SIZES[size][4]
        fwd = Forward(model, batches[0])
        d, t = part_forward(fwd, batches, size)
        lines += t.lines("forward" + sfx, d)
        compiled = torch.compile(model, mode="reduce-overhead")
        d, t = part_compiled(compiled, batches, size)
        lines += t.lines("compiled" + sfx, d)
        forwards[size] = (fwd, compiled, batches)
    who = ""
    if args.fork:
        import smolvm

        report(lines, "golden", args.out)
        idx = smolvm.forkpoint(seed=7)
        if idx is None:
            return 0
        who, lines = f"clone{idx}", []
        # The golden's graphs, replayed here on this clone's own buffers.
        for size in sizes:
            fwd, compiled, batches = forwards[size]
            sfx = SIZES[size][4]
            d, t = part_forward(fwd, batches, size)
            lines += t.lines("forward" + sfx, d)
            d, t = part_compiled(compiled, batches, size)
            lines += t.lines("compiled" + sfx, d)
    for size in sizes:
        sfx = SIZES[size][4]
        m2, batches, targets = model_and_data(1234, size)
        d, t = part_train(m2, batches, targets, size)
        lines += t.lines("train" + sfx, d)
        m3, _, _ = model_and_data(1234, size)
        d, t = part_train_compiled(m3, batches, targets, size)
        lines += t.lines("train_compiled" + sfx, d)
        del m2, m3
    lines.append("PASS graphs")
    report(lines, who, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
