#!/usr/bin/env python3
"""Checks on the documentation as a clone has it (issue 30).

  docs_test.py design-refs ROOT   no "DESIGN §N" and no ../shared/ path left in the
                                  README, docs/ or the sources: a clone has neither
                                  (the map is docs/architecture.md)
  docs_test.py figures ROOT       every throughput (N tok/s) and "took N s" figure in
                                  the prose of the README, docs/PERF.md and
                                  docs/bench.md is a value of a committed record
                                  (bench/results but superseded/, bench/records) or a cell of a
                                  generated table (those are checked against the
                                  records by generated_tables_are_current)

Exits 0 when all hold, 1 listing each miss."""

import json
import os
import re
import sys

GENERATED = re.compile(r"<!-- BEGIN generated.*?<!-- END generated[^>]*-->", re.S)
FIGURE = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*tok/s|took\s+(\d[\d,]*(?:\.\d+)?)\s*s\b")


def tracked_texts(root):
    skip = {".git", "build", "bench", "__pycache__", "fuzz"}
    for top in ["README.md", "docs", "src", "learner", "include", "python", "scripts", "tests"]:
        path = os.path.join(root, top)
        if os.path.isfile(path):
            yield path
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if d not in skip and not d.startswith("build")]
            for name in filenames:
                if name.endswith((".md", ".h", ".cc", ".cu", ".cuh", ".c", ".py", ".sh", ".txt", ".toml", ".plan")):
                    yield os.path.join(dirpath, name)


def design_refs(root):
    me = os.path.abspath(__file__)
    misses = []
    for path in tracked_texts(root):
        if os.path.abspath(path) == me:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if "DESIGN §" in line or "DESIGN.md" in line or "../shared/" in line:
                    misses.append("%s:%d: %s" % (os.path.relpath(path, root), n, line.strip()))
    return misses


def record_numbers(root):
    """{"tok": throughputs (keys naming tok), "s": fork durations (keys naming fork,
    ending _s)}, from today's results: superseded ones (bench/results/superseded)
    describe behaviour that is gone."""
    values = {"tok": set(), "s": set()}

    def walk(v, key=""):
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)):
            if "tok" in key:
                values["tok"].add(float(v))
            if key.endswith("_s") and "fork" in key:
                values["s"].add(float(v))
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)

    for top in ("bench/results", "bench/records"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d != "superseded"]
            for name in filenames:
                if name.endswith(".json"):
                    with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                        try:
                            walk(json.load(f))
                        except ValueError:
                            pass
    return values


def figures(root):
    values = record_numbers(root)
    misses = []
    for doc in ("README.md", "docs/PERF.md", "docs/bench.md"):
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = f.read()
        tables = " ".join(m.group(0) for m in GENERATED.finditer(text))
        cells = {c.replace(",", "") for c in re.findall(r"\d[\d,]*(?:\.\d+)?", tables)}
        prose = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for m in FIGURE.finditer(prose):
            shown = (m.group(1) or m.group(2)).replace(",", "")
            places = len(shown.split(".")[1]) if "." in shown else 0
            want = float(shown)
            kind = values["tok"] if m.group(1) else values["s"]
            if shown in cells or any(round(v, places) == want for v in kind):
                continue
            line = prose.count("\n", 0, m.start()) + 1
            misses.append("%s:%d: '%s' is in no committed record or generated table" % (doc, line, m.group(0)))
    return misses


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("design-refs", "figures"):
        print(__doc__, file=sys.stderr)
        return 2
    misses = design_refs(sys.argv[2]) if sys.argv[1] == "design-refs" else figures(sys.argv[2])
    for m in misses:
        print("FAIL: " + m)
    print("%s: %s" % (sys.argv[1], "PASS" if not misses else "%d miss(es)" % len(misses)))
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
