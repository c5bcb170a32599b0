#!/usr/bin/env python3
"""CUDA graphs in torch (issue 33): torch.cuda.graphs capture/replay and
torch.compile(mode="reduce-overhead") on a small model, natively or through
the shims (the same script; the caller sets the environment).

Parts, each printing `RESULT <part> <sha256 of its outputs>` (bit-identical
natively and through the shims) and `TIME <part> <median step ms>`:
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
"""
import argparse
import hashlib
import os
import statistics
import sys
import time

import torch

HIDDEN, LAYERS, BATCH = 1024, 4, 64


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:24]


def model_and_data(seed):
    g = torch.Generator().manual_seed(seed)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).cuda()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    batches = [torch.randn(BATCH, HIDDEN, generator=g).cuda() for _ in range(12)]
    targets = [torch.randn(BATCH, HIDDEN, generator=g).cuda() for _ in range(12)]
    return model, batches, targets


def timed(fn, n):
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


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


def part_forward(fwd, batches):
    outs = [fwd(b) for b in batches]
    ms = timed(lambda: fwd(batches[0]), 50)
    return digest(outs), ms


def part_compiled(compiled, batches):
    with torch.no_grad():
        outs = [compiled(b).clone() for b in batches]
        ms = timed(lambda: compiled(batches[0]), 50)
    return digest(outs), ms


def part_train(model, batches, targets):
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
    ms = timed(g.replay, 30)
    return digest(losses + [p for p in model.parameters()]), ms


def part_train_compiled(model, batches, targets):
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
    ms = timed(lambda: run(batches[0], targets[0]), 20)
    return digest(losses + [p for p in model.parameters()]), ms


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
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.fork:
        torch.set_num_threads(1)  # until the fork (docs/torch.md)
    model, batches, targets = model_and_data(1234)
    lines = []
    fwd = Forward(model, batches[0])
    d, ms = part_forward(fwd, batches)
    lines += [f"RESULT forward {d}", f"TIME forward {ms:.3f}"]
    compiled = torch.compile(model, mode="reduce-overhead")
    d, ms = part_compiled(compiled, batches)
    lines += [f"RESULT compiled {d}", f"TIME compiled {ms:.3f}"]
    who = ""
    if args.fork:
        import smolvm

        report(lines, "golden", args.out)
        idx = smolvm.forkpoint(seed=7)
        if idx is None:
            return 0
        who, lines = f"clone{idx}", []
        # The golden's graphs, replayed here on this clone's own buffers.
        d, ms = part_forward(fwd, batches)
        lines += [f"RESULT forward {d}", f"TIME forward {ms:.3f}"]
        d, ms = part_compiled(compiled, batches)
        lines += [f"RESULT compiled {d}", f"TIME compiled {ms:.3f}"]
    m2, _, _ = model_and_data(1234)
    d, ms = part_train(m2, batches, targets)
    lines += [f"RESULT train {d}", f"TIME train {ms:.3f}"]
    m3, _, _ = model_and_data(1234)
    d, ms = part_train_compiled(m3, batches, targets)
    lines += [f"RESULT train_compiled {d}", f"TIME train_compiled {ms:.3f}"]
    lines.append("PASS graphs")
    report(lines, who, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
