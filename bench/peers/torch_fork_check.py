#!/usr/bin/env python3
"""Checks `bench run --learner torch` results (issue 14, must-show 2), fork
arm against native, over a results directory and the logs beside it:

  losses   each clone's per-step losses equal the native learner's with the
           same lid (native reps compared with each other first);
  span     span tok/s (all tokens / the time the learners trained together),
           fork ÷ native medians per N (goal >= 0.9);
  memory   per clone NVML peak (the clones' daemon workers) <= the native
           learners' NVML peak - the base weights' bytes + 100 MiB;
  fork     each clone serving <= 0.5 s after its fork request (the daemon's
           per-clone fork time);
  nan      no non-finite loss anywhere.

Usage: torch_fork_check.py RESULTS_DIR [--logs LOGS_DIR] [--json FILE]
Prints one PASS/FAIL/INFO line per check and cell; --json writes the figures
(the record's summary). Exit 0 when nothing FAILed (missing cells are INFO).
"""
import argparse
import glob
import json
import math
import os
import statistics
import sys

NAN = float("nan")


def load(results):
    runs = []
    for p in sorted(glob.glob(os.path.join(results, "*.json"))):
        try:
            r = json.load(open(p))
        except ValueError:
            continue
        if r.get("learner") == "torch":
            r["_file"] = os.path.basename(p)
            runs.append(r)
    return runs


def span_tok_s(r):
    ls = [l for l in r.get("learners", []) if l.get("t_done") and l.get("train_s")]
    if not ls or len(ls) < r.get("learners_expected", 0):
        return NAN
    tokens = sum(l["tok_s"] * l["train_s"] for l in ls)
    start = min(l["t_done"] - l["train_s"] for l in ls)
    end = max(l["t_done"] for l in ls)
    return tokens / (end - start) if end > start else NAN


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def median(xs):
    xs = [x for x in xs if finite(x)]
    return statistics.median(xs) if xs else NAN


def cell(r):
    return (r["arm"], r["n"], r.get("model"), r.get("steps"), r.get("batch"), r.get("maxseq"))


def base_bytes(logs, r):
    """The base weights' bytes, from a learner's done event in the run's coord directory."""
    run = r["_file"][:-5]
    for p in glob.glob(os.path.join(logs, run, "coord", "learner_*.jsonl")):
        for line in open(p, errors="replace"):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "done" and e.get("base_bytes"):
                return e["base_bytes"]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--logs")
    ap.add_argument("--json")
    a = ap.parse_args()
    logs = a.logs or os.path.join(os.path.dirname(os.path.abspath(a.results)), "logs")
    runs = load(a.results)
    failed = 0
    out = {}

    def say(kind, text):
        nonlocal failed
        failed += kind == "FAIL"
        print("%s %s" % (kind, text))

    if not runs:
        say("FAIL", "no torch-learner results in %s" % a.results)
        return 1
    native = [r for r in runs if r["arm"] == "native"]
    fork = [r for r in runs if r["arm"] == "fork"]

    # losses: by (model, steps, batch, maxseq, lid)
    def shape(r):
        return (r.get("model"), r.get("steps"), r.get("batch"), r.get("maxseq"))

    ref = {}
    native_agree = True
    for r in native:
        for l in r.get("learners", []):
            key = shape(r) + (str(l["lid"]),)
            if key in ref and ref[key] != l.get("losses"):
                native_agree = False
            ref.setdefault(key, l.get("losses"))
    say("INFO" if native_agree else "INFO", "native runs %s each other for the same lid" % (
        "agree with" if native_agree else "DIFFER from"))
    same = differ = unmatched = 0
    worst = 0.0
    for r in fork:
        for l in r.get("learners", []):
            want = ref.get(shape(r) + (str(l["lid"]),))
            if want is None:
                unmatched += 1
                continue
            if want == l.get("losses"):
                same += 1
            else:
                differ += 1
                d = [abs(x - y) for x, y in zip(want, l.get("losses") or []) if finite(x) and finite(y)]
                worst = max([worst] + d)
    out.update(clones_losses_identical=same, clones_losses_differ=differ, clones_without_native_lid=unmatched)
    say("PASS" if same and not differ else ("FAIL" if differ else "INFO"),
        "losses: %d clones bit-identical to the native learner with their lid, %d differ (max abs %.3g), "
        "%d without a native run of their lid" % (same, differ, worst, unmatched))

    # span tok/s ratios
    by_cell = {}
    for r in runs:
        by_cell.setdefault(cell(r), []).append(r)
    for (arm, n, model, steps, batch, maxseq), rs in sorted(by_cell.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        spans = [span_tok_s(r) for r in rs]
        done = ["%d/%d" % (r.get("learners_done", 0), r.get("learners_expected", 0)) for r in rs]
        print("INFO cell %s N=%d %s: reps %d done %s span tok/s median %.0f (%s) peak_gpu %s MiB" % (
            arm, n, model, len(rs), ",".join(done), median(spans), ", ".join("%.0f" % s for s in spans),
            ",".join("%.0f" % r.get("peak_gpu_mib", NAN) for r in rs)))
        out["span_tok_s_%s_n%d" % (arm, n)] = median(spans)
    for (arm, n, model, steps, batch, maxseq), rs in sorted(by_cell.items()):
        if arm != "fork":
            continue
        nat = by_cell.get(("native", n, model, steps, batch, maxseq))
        if not nat:
            continue
        ratio = median([span_tok_s(r) for r in rs]) / median([span_tok_s(r) for r in nat])
        out["span_ratio_n%d" % n] = ratio
        say("PASS" if ratio >= 0.9 else ("FAIL" if finite(ratio) else "INFO"),
            "span tok/s fork / native at N=%d: %.3f (goal >= 0.9)" % (n, ratio))

    # memory: clone workers' NVML peaks vs the native learners' minus the base
    native_peaks = [p["peak_mib"] for r in native for p in r.get("process_peaks", []) if
                    p.get("what", "").startswith("learner")]
    base = next((b for b in (base_bytes(logs, r) for r in native + fork) if b), None)
    if native_peaks and base:
        limit = max(native_peaks) - base / 2**20 + 100
        out.update(native_learner_peak_mib=max(native_peaks), base_mib=base / 2**20, clone_limit_mib=limit)
        for r in fork:
            peaks = sorted((p["peak_mib"] for p in r.get("process_peaks", [])), reverse=True)
            clones = peaks[1:1 + r["n"]]  # the largest is the golden's worker (it holds the base)
            if not clones:
                continue
            worst_clone = max(clones)
            out["clone_peak_mib_max_n%d" % r["n"]] = max(out.get("clone_peak_mib_max_n%d" % r["n"], 0), worst_clone)
            say("PASS" if worst_clone <= limit else "FAIL",
                "memory %s: per clone NVML peak max %.0f MiB, median %.0f (limit: native peak %.0f - base %.0f + 100 = "
                "%.0f MiB); golden %.0f MiB" % (r["_file"], worst_clone, statistics.median(clones), max(native_peaks),
                                                base / 2**20, limit, peaks[0]))
    else:
        say("INFO", "memory: no native learner peaks or base size (native runs with their logs needed)")

    # fork time per clone
    ms = [c.get("ms", NAN) for r in fork for c in r.get("clones", [])]
    if ms:
        slow = [x for x in ms if finite(x) and x > 500]
        out.update(clone_fork_ms_median=median(ms), clone_fork_ms_max=max(x for x in ms if finite(x)))
        say("PASS" if not slow else "FAIL", "fork: %d clones, the daemon's fork time median %.0f ms, max %.0f ms "
            "(goal <= 500 ms each); %d over" % (len(ms), median(ms), out["clone_fork_ms_max"], len(slow)))

    # nan
    nan = sum(1 for r in runs for l in r.get("learners", []) if any(not finite(x) for x in (l.get("losses") or [NAN])))
    out["nan_learners"] = nan
    say("PASS" if nan == 0 else "FAIL", "nan: %d learners with a non-finite loss over %d runs" % (nan, len(runs)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items()}, f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
