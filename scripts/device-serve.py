"""Drives a running serve for scripts/device-serve.sh: a pool of the torch
golden (or, rehearsing, fake:echo), min_ready 8, leased 8 at a time for
ROUNDS rounds, every result checked; then the pool deleted. Writes a JSON
summary (argv[1]). Exit 0 only when every round's 8 results came back."""

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import smolvm  # noqa: E402

out_path = sys.argv[1]
rounds = int(os.environ.get("ROUNDS", "20"))
k = int(os.environ.get("K", "8"))
fake = os.environ.get("SERVE_DRIVER") == "fake"
py = os.environ.get("PY", "/opt/torch/.venv/bin/python3")
venv = os.path.dirname(os.path.dirname(py))
here = os.path.dirname(os.path.abspath(__file__))
c = smolvm.Client()
summary = {"rounds": rounds, "k": k, "driver": "fake" if fake else "machine", "ok_rounds": 0, "errors": []}
if fake:
    golden = dict(cmd=["fake:echo"])
else:
    golden = dict(cmd=[py, "/job/device-serve-golden.py"], volumes=[venv + ":" + venv + ":ro", here + ":/job:ro"],
                  cuda=True, env={"PYTHONUNBUFFERED": "1"})
t0 = time.monotonic()
pool = c.create_pool("torch", golden=golden, min_ready=k, cpus=1, ttl_s=300)
while pool.ready < k:
    if time.monotonic() - t0 > 400 or pool.info.get("detail", "").startswith("golden"):
        summary["errors"].append("pool not ready: %s" % pool.info)
        break
    time.sleep(0.5)
summary["ready_s"] = round(time.monotonic() - t0, 2)
acquire_ms, results_ms = [], []
for r in range(rounds):
    if summary["errors"]:
        break
    payloads = [{"round": r, "member": m, "tokens": [(r * 131 + m * 17 + i) % 1000 + 1 for i in range(64)]}
                for m in range(k)]
    a = time.monotonic()
    try:
        with pool.lease(k, payloads=payloads, wait=300) as lease:
            b = time.monotonic()
            res = lease.results(timeout=300)
            e = time.monotonic()
    except (smolvm.ServeError, TimeoutError) as ex:
        summary["errors"].append("round %d: %s" % (r, ex))
        break
    acquire_ms.append((b - a) * 1000)
    results_ms.append((e - b) * 1000)
    good = len(res) == k and all((x.get("round") == r and x.get("member") == m) if not fake else x["echo"]["round"] == r
                                 for m, x in enumerate(res))
    if not good:
        summary["errors"].append("round %d: results %s" % (r, res))
        break
    summary["ok_rounds"] += 1
    if r == 0 and not fake:
        summary["clone_example"] = res[0]
    print("round %d: acquire %.1f ms, results %.1f ms" % (r, acquire_ms[-1], results_ms[-1]), flush=True)
if acquire_ms:
    summary["acquire_ms_p50"] = round(statistics.median(acquire_ms), 1)
    summary["acquire_ms_max"] = round(max(acquire_ms), 1)
    summary["results_ms_p50"] = round(statistics.median(results_ms), 1)
pool.delete()
deadline = time.monotonic() + 120
while c.capacity()["reclaims_pending"] and time.monotonic() < deadline:
    time.sleep(0.2)
summary["leases_left"] = len(c.leases())
with open(out_path, "w") as f:
    json.dump(summary, f, indent=1)
print(json.dumps(summary), flush=True)
sys.exit(0 if summary["ok_rounds"] == rounds and not summary["errors"] else 1)
