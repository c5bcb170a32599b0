#!/usr/bin/env python3
"""Issue 18 must-show 1: a fork run's final losses against native runs of the
same lids, bit for bit.

Usage: density-check.py --fork FORK.json [--native NATIVE.json]... [--native-dir DIR]...
                        [--expect-n N] [--out SUMMARY.json]

FORK.json and NATIVE.json are `smolvm bench` results (learners[] with lid,
lossN, losses); a --native-dir holds a learner's coordination files
(learner_<lid>.jsonl, whose "done" event carries the same fields), as
`smolvm-learner train --coord DIR --lid L` writes them. Every native lid must
be in the fork run with the same per-step losses. Prints one line per lid and
a verdict; exit 0 when the fork run has every learner done (--expect-n), no
nan, at least one native lid compared and none differing; else 1.
"""
import argparse, glob, json, math, os, sys


def from_result(path):
    r = json.load(open(path))
    return {str(l.get("lid")): l for l in r.get("learners", [])}, r


def from_coord(d):
    out = {}
    for p in glob.glob(os.path.join(d, "learner_*.jsonl")):
        for line in open(p, errors="replace"):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "done":
                out[str(e.get("lid"))] = e
    return out


def bad(x):
    return not isinstance(x, (int, float)) or math.isnan(x) or math.isinf(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fork", required=True)
    ap.add_argument("--native", action="append", default=[])
    ap.add_argument("--native-dir", action="append", default=[])
    ap.add_argument("--expect-n", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    fork, fr = from_result(a.fork)
    native = {}
    for p in a.native:
        native.update(from_result(p)[0])
    for d in a.native_dir:
        native.update(from_coord(d))
    n = fr.get("n", len(fork))
    done = fr.get("learners_done", len(fork))
    nan = sum(1 for l in fork.values() if bad(l.get("lossN")) or any(bad(x) for x in l.get("losses", [])))
    print(f"fork run {os.path.basename(a.fork)}: n={n} done={done} nan={nan} peak_gpu_mib={fr.get('peak_gpu_mib')} "
          f"fork_s={fr.get('fork_s')}")
    print("  lid  fork lossN              native lossN            same losses")
    compared, differing, missing = [], [], []
    for lid in sorted(native, key=lambda x: int(x) if x.isdigit() else 1 << 30):
        nl, fl = native[lid], fork.get(lid)
        if fl is None:
            missing.append(lid)
            print(f"  {lid:>3}  {'missing':22s}  {nl.get('lossN')!r:22s}  -")
            continue
        same = fl.get("losses") == nl.get("losses") and fl.get("lossN") == nl.get("lossN") and fl.get("losses")
        compared.append(lid)
        if not same:
            differing.append(lid)
        print(f"  {lid:>3}  {fl.get('lossN')!r:22s}  {nl.get('lossN')!r:22s}  {'yes' if same else 'NO'}")
    ok = bool(compared) and not differing and not missing and nan == 0 and (a.expect_n == 0 or (n == a.expect_n and done == a.expect_n))
    verdict = (f"{'PASS' if ok else 'FAIL'}: {len(compared)} native lids compared ({', '.join(compared)}), "
               f"{len(differing)} differing, {len(missing)} missing from the fork run; fork {done}/{n} done, {nan} nan")
    print(verdict)
    if a.out:
        json.dump({"fork": os.path.basename(a.fork), "n": n, "done": done, "nan": nan, "compared": compared,
                   "differing": differing, "missing": missing, "pass": ok, "peak_gpu_mib": fr.get("peak_gpu_mib"),
                   "fork_s": fr.get("fork_s")}, open(a.out, "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
