#!/usr/bin/env python3
"""Where a machine fork of N clones spent its time, from its logs.

Usage: scripts/fork_timeline.py GOLDEN_LOG DAEMON_LOG
  GOLDEN_LOG: the golden machine's log (the supervisor's `fork: clone <i> '<name>'
              pid <p> ms=<t> order=.. c1=.. cgroup=.. unshared=.. mounts=.. init=..
              [built=.. released=.. hello=..]` lines; bench: bench-*-g.log)
  DAEMON_LOG: the CUDA daemon's log (`clone build: memory .. modules .. (N: L
              loaded, K preloaded), blas .. dnn .. (N calls: R replayed, K
              preloaded), total ..` lines of its workers)
Every step is in ms since the request met the golden at its forkpoint. Prints
the span of each phase over the clones and the median of each per-clone step.
"""
import re
import statistics
import sys

STEP_KEYS = ["order", "c1", "cgroup", "unshared", "mounts", "init", "built", "released", "hello"]
CLONE_RE = re.compile(r"fork: clone (\d+) '([^']+)' pid (\d+) ms=(\d+)((?: \w+=[\d.]+)*)")
SPAN_RE = re.compile(r"fork: clone \d+ of golden pid .* sent=([\d.]+) built=([\d.]+)")
BUILD_RE = re.compile(r"clone build: memory ([\d.]+) ms .*?modules ([\d.]+) ms(?: \([^)]*\))?, blas ([\d.]+) ms, "
                      r"dnn ([\d.]+) ms(?: \([^)]*\))?, "
                      r"total ([\d.]+) ms")


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    clones = []
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            m = CLONE_RE.search(line)
            if not m:
                continue
            c = {"index": int(m.group(1)), "ms": float(m.group(4))}
            for k, v in re.findall(r" (\w+)=([\d.]+)", m.group(5)):
                c[k] = float(v)
            clones.append(c)
    builds, spans, made = [], [], []
    made_re = re.compile(r"clone build: .*modules [\d.]+ ms \(\d+: (\d+) loaded, (\d+) preloaded\).*"
                         r"dnn [\d.]+ ms \(\d+ calls: (\d+) replayed, (\d+) preloaded\)")
    with open(sys.argv[2], errors="replace") as f:
        for line in f:
            m = BUILD_RE.search(line)
            if m:
                builds.append([float(x) for x in m.groups()])
            m = made_re.search(line)
            if m:
                made.append([int(x) for x in m.groups()])
            m = SPAN_RE.search(line)
            if m:
                spans.append((float(m.group(1)), float(m.group(2))))
    if not clones:
        print("no per-clone fork lines (a build before issue 18's timing lines?)")
        return 1
    n = len(clones)
    last = max(c["ms"] for c in clones)
    print(f"{n} clones, last serving at {last:.0f} ms")
    if all("released" in c and c["released"] > 0 for c in clones):
        built = [c["built"] for c in clones]
        print(f"  daemon: built {min(built):.0f}..{max(built):.0f} ms, released at {clones[0]['released']:.0f} ms")
    if not all("order" in c and "init" in c for c in clones):
        print("  (no per-clone steps: a build before issue 18's timing lines)")
        return 1
    order = [c["order"] for c in clones]
    init = [c["init"] for c in clones]
    print(f"  supervisor: first order {min(order):.0f} ms, last init {max(init):.0f} ms "
          f"({(max(init) - min(order)) / n:.1f} ms per clone)")
    pairs = [("golden fork -> C1 connected", "order", "c1"), ("cgroup move", "c1", "cgroup"),
             ("-> unshared seen", "cgroup", "unshared"), ("mounts", "unshared", "mounts"),
             ("-> init up (C1 forks C2)", "mounts", "init"),
             ("init -> Hello (C2 forks C3, pinned copy, connect)", "init", "hello"),
             ("Hello -> served", "hello", "ms")]
    for what, a, b in pairs:
        d = [c[b] - c[a] for c in clones if c.get(a, 0) > 0 and c.get(b, 0) > 0]
        if d:
            print(f"  {what}: median {median(d):.1f} ms, max {max(d):.1f} ms")
    if spans:
        # Builds in flight at once: the most [sent, built) spans that overlap.
        events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        most = cur = 0
        for _, d in events:
            cur += d
            most = max(most, cur)
        print(f"  daemon: {len(spans)} builds sent {min(a for a, _ in spans):.0f}..{max(a for a, _ in spans):.0f} ms, "
              f"at most {most} in flight at once")
    if builds:
        cols = list(zip(*builds))
        names = ["memory", "modules", "blas", "dnn", "total"]
        print("  clone build medians: " + ", ".join(f"{nm} {median(col):.1f} ms" for nm, col in zip(names, cols)) +
              f" ({len(builds)} builds, max total {max(cols[4]):.1f} ms)")
    if made:
        # What each build made itself and what its worker preloaded ahead.
        cols = list(zip(*made))
        print(f"  clone builds made: modules {sum(cols[0])} loaded, {sum(cols[1])} preloaded; "
              f"cuDNN calls {sum(cols[2])} replayed, {sum(cols[3])} preloaded ({len(made)} builds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
