#!/usr/bin/env python3
"""Writes one device run's record: $OUT/records/<kind>_<UTC stamp>.json.

A record is what `smolvm bench tables` reads from bench/records/ to generate
docs/PERF.md's device tables (docs/bench.md, "Records"): kind, date (UTC),
card (nvidia-smi), build (sha256 of build/smolvm), command, a summary of
named figures, and the raw samples it was computed from. Only the measuring
scripts call this; records are never edited by hand.

Usage: device-record.py KIND --out DIR --command CMD [--summary JSON] SAMPLES...
  KIND micro-bench: SAMPLES are micro_bench JSON lines (native and shim)
  KIND warm-fork:   SAMPLES are `cuda fork --json` lines, one file per share mode, and
                    memory-SHARE.json (each clone's NVML MiB, a pooled worker's context)
  other kinds:      the summary comes from --summary; SAMPLES are kept as given
"""
import argparse, datetime, hashlib, json, os, statistics, subprocess, sys


def lines(path):
    """JSON lines, or one JSON document (as a list of one)."""
    try:
        doc = json.load(open(path))
        return doc if isinstance(doc, list) else [doc]
    except ValueError:
        pass
    out = []
    for line in open(path, errors="replace"):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def card():
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
        return q[0].replace(", ", " / ") if q else "no GPU"
    except (OSError, subprocess.SubprocessError):
        return "no GPU"


def build_of(root):
    """(sha256 of the smolvm binary, the checkout it was packed from or None).

    $BUILD (scripts/lib.sh's find_build), else build/, else .carry/build: a
    script that never linked build/ still names the binary it ran. The commit
    (SOURCE_COMMIT, scripts/device-pack.sh) is read beside that same binary.
    """
    for d in (os.environ.get("BUILD"), os.path.join(root, "build"), os.path.join(root, ".carry", "build")):
        if not d:
            continue
        try:
            sha = hashlib.sha256(open(os.path.join(d, "smolvm"), "rb").read()).hexdigest()
        except OSError:
            continue
        try:
            return sha, open(os.path.join(d, "SOURCE_COMMIT")).read().strip()
        except OSError:
            return sha, None
    return "unknown", None


def micro_summary(samples):
    s = {}
    for rows in samples.values():
        for r in rows:
            lab = r.get("label", "?")
            if r.get("bench") == "sync_roundtrip":
                s[f"sync_us_{lab}"] = r["median_us"]
            elif r.get("bench") == "launch_rate":
                s[f"launch_complete_per_s_{lab}"] = r["complete_per_s"]
            elif r.get("bench") == "copy":
                s[f"{r['dir']}_{r['host_mem']}_gbps_{lab}"] = r["median_gbps"]
    return dict(sorted(s.items()))


def fork_summary(samples):
    s = {}
    for name, rows in samples.items():
        if not rows:
            continue
        if name.startswith("checks-"):  # device-fork.sh: the fork's rc and the clones' own checks, per share mode
            c = rows[0]
            for k in ("fork_rc", "clones_ok", "globals_ok"):
                s[f"{c['share']}_{k}"] = c[k]
            continue
        if name.startswith("memory-"):  # device-fork.sh: NVML per clone, one document per share mode
            m = rows[0]
            if m.get("clone_nvml_mib"):
                s[f"{m['share']}_clone_nvml_mib_median"] = statistics.median(m["clone_nvml_mib"])
            if m.get("context_mib") is not None:
                s[f"{m['share']}_context_mib"] = m["context_mib"]
            continue
        share = rows[0].get("share") or name.replace("fork-", "").replace(".jsonl", "")
        ms = [r["ms"] for r in rows if "ms" in r]
        build = [r["build_ms"] for r in rows if "build_ms" in r]
        s[f"{share}_clones"] = len(rows)
        if ms:
            s[f"{share}_ms_median"] = statistics.median(ms)
            s[f"{share}_all_by_ms"] = max(ms)
        if build:
            s[f"{share}_build_ms_median"] = statistics.median(build)
    return s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind")
    p.add_argument("--out", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--summary", default="{}")
    p.add_argument("samples", nargs="*")
    a = p.parse_intermixed_args()
    samples = {os.path.basename(f): lines(f) for f in a.samples if os.path.exists(f)}
    summary = {"micro-bench": micro_summary, "warm-fork": fork_summary}.get(a.kind, lambda _: {})(samples)
    summary.update(json.loads(a.summary))
    now = datetime.datetime.now(datetime.timezone.utc)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build, commit = build_of(root)
    rec = {"kind": a.kind, "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "card": card(), "build": build,
           "command": a.command, "summary": summary, "samples": samples}
    if commit:
        rec["source_commit"] = commit
    os.makedirs(os.path.join(a.out, "records"), exist_ok=True)
    path = os.path.join(a.out, "records", f"{a.kind}_{now.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    print(f"record: {path}")


if __name__ == "__main__":
    sys.exit(main())
