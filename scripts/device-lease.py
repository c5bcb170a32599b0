#!/usr/bin/env python3
"""Issue 32, must-show 2: the figures of a record of kind `lease`, measured
in parts over 2-3 device calls (scripts/plans/episodes*.plan); each part
writes STATE/<part>.json (and a copy under OUT/parts/), and `record` writes
the record once every part is there. Driven by scripts/device-lease.sh,
which starts serve (machine driver) for the parts that need it and exports
SMOLVM_HOME; run it through that script.

Parts:
  lease       lease latency (request -> the clone's user code running) from a
              ready pool of a 0.5B torch golden (scripts/device-lease-golden.py,
              min_ready 64 >= every concurrency): ROUNDS_C1 (30) rounds of 1,
              ROUNDS (20) of 8 and of 64 concurrent acquires, the pool
              refilled (ready back at 64, removals done) before each round;
              the lower levels first (taking turns), then the 64s with what
              is left of the budget, at least TOP_RESERVE_S (150 s): a
              refill of 64 takes ~45 s of GPU context churn on an H100, so
              the 64s get a few rounds, not 20, within a device call;
              refill_clones_per_s from the 64-rounds (clones made ready per
              second from the round's acquire to ready at 64 again)
  first-step  the example's learner (examples/grpo_learner.py, qwen2.5-0.5b
              bf16, DPO 2x256): its first training step in a leased clone
              (warmed up while parked, and without the warm-up) against a
              native process's first step after the same pre-forkpoint work
              (load, LoRA, forward warm-up); N_FIRST (3) of each, one at a time;
              then once the native learner through the shims without a fork
              (`smolvm cuda env`): whether a first update that differs from
              native's comes from the shims or from the fork
  loop        examples/grpo_loop.py forked: qwen2.5-0.5b bf16, K (16) learners,
              ITERATIONS (10), tokens/s of the loop
  loop-kept   the same episodes to K native learner processes started once
              and kept for the run (the upper bound)
  loop-cold   the same loop starting K native processes each iteration
  loop7b      examples/grpo_loop.py forked at qwen2.5-7b bf16, K learners,
              ITERATIONS_7B (3) (natively 16 do not fit: its own figure)
  record      once every part is in STATE: the record (scripts/device-record.py)

Every part stops starting rounds or iterations past BUDGET_S (its time box
less a margin) and says how many ran. Env: PY (the learners' python), K,
ITERATIONS, ITERATIONS_7B, ROUNDS, ROUNDS_C1, CONCURRENCY ("1 8 64"),
N_FIRST, BUDGET_S, REHEARSE=1 (BACKEND=fake: no torch, the learner's
--stand-in and the golden's --no-torch; the figures mean nothing).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import grpo_loop  # noqa: E402
import smolvm  # noqa: E402

PARTS = ["lease", "first-step", "loop", "loop-kept", "loop-cold", "loop7b"]
REHEARSE = os.environ.get("REHEARSE") == "1"
PY = os.environ.get("PY", "/usr/bin/python3" if REHEARSE else "/opt/torch/.venv/bin/python3")
LEARNER = os.path.join(ROOT, "examples", "grpo_learner.py")
T0 = time.monotonic()


def env_int(name, default):
    return int(os.environ.get(name, default))


def budget_left():
    return float(os.environ.get("BUDGET_S", "300")) - (time.monotonic() - T0)


def tail_left(lo, hi):
    """Seconds a clean-up step may wait: what is left of the budget plus
    TAIL_S (25: the part's time box lies that far past its budget, less the
    shell's own clean-up), between lo and hi."""
    return max(lo, min(hi, budget_left() + float(os.environ.get("TAIL_S", "25"))))


def log(msg):
    print("[device-lease +%.0fs] %s" % (time.monotonic() - T0, msg), flush=True)


def pct(values, p):
    """The nearest-rank percentile (p in 0..100): for 20 samples, p99 is the largest."""
    v = sorted(values)
    return v[max(0, math.ceil(p / 100.0 * len(v)) - 1)]


def card():
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
        return q[0] if q else "no GPU"
    except (OSError, subprocess.SubprocessError):
        return "no GPU"


def smi_used():
    """GPU 0's memory.used in MiB, or None without nvidia-smi."""
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=20)
        return int(q.stdout.split()[0]) if q.returncode == 0 and q.stdout.split() else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def memory_check(level, slack=int(os.environ.get("SLACK_MIB", "64"))):
    """Waits up to 60 s (less past the budget) for the GPU's memory to be back at `level` (+ slack) MiB."""
    if level is None:
        return {"level_mib": None, "after_mib": smi_used(), "back": None}
    deadline = time.monotonic() + tail_left(5, 60)
    while True:
        after = smi_used()
        if after is not None and after <= level + slack or time.monotonic() > deadline:
            return {"level_mib": level, "after_mib": after, "slack_mib": slack,
                    "back": after is not None and after <= level + slack}
        time.sleep(0.5)


def client():
    return smolvm.Client(os.path.join(os.environ["SMOLVM_HOME"], "serve.sock"), timeout=300)


class PoolNotReady(RuntimeError):
    pass


def wait_ready(pool, n, timeout, settled=True, stall_s=None):
    """Until the pool has n ready clones (and, settled, no removal pending).
    Never silent and never past the part's budget: every 10 s it says where
    the pool stands (ready, forking, serve's refill state); it raises
    PoolNotReady, with serve's own words for why (the pool's detail and
    refill), at `timeout`, when the budget is spent, or when the pool has
    made no clone for `stall_s` (STALL_S, 60) while its refill fails."""
    c = pool.client
    stall_s = stall_s or float(os.environ.get("STALL_S", "60"))
    t0 = time.monotonic()
    deadline = t0 + min(timeout, max(1.0, budget_left() - 5))
    best, best_at, said = -1, t0, t0
    while True:
        info = pool.refresh().info
        if info["ready"] >= n and info["forking"] == 0 and (not settled or not c.capacity()["reclaims_pending"]):
            return
        now = time.monotonic()
        if info["ready"] + info["forking"] > best:
            best, best_at = info["ready"] + info["forking"], now
        why = "%d of %d ready, %d forking; detail: %s; refill: %s" % (
            info["ready"], n, info["forking"], info.get("detail") or "-", json.dumps(info.get("refill") or {}))
        if now > deadline:
            raise PoolNotReady("pool %s not ready after %.0f s (%s): %s" % (
                pool.name, now - t0, "the part's budget" if deadline < t0 + timeout else "its timeout", why))
        if "ended (exit code" in (info.get("detail") or ""):  # serve: the pool's golden ended
            raise PoolNotReady("pool %s: its golden ended: %s (its log: OUT/golden-%s.log)" % (
                pool.name, why, pool.name))
        if info.get("refill") and now - best_at > stall_s:
            raise PoolNotReady("pool %s made no clone for %.0f s while its refill fails: %s" % (
                pool.name, now - best_at, why))
        if now - said >= 10:
            log("pool %s: %s" % (pool.name, why))
            said = now
        time.sleep(0.05)


OUT_DIR = None  # main() sets it: the part's OUT


def save_golden_log(pool):
    """The pool's golden's log (its program's output) to OUT/golden-POOL.log,
    before the pool's deletion removes its machine."""
    try:
        name = pool.refresh().info.get("golden_machine")
        with open(os.path.join(os.environ["SMOLVM_HOME"], "machines", name, "log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200000))
            text = f.read()
        with open(os.path.join(OUT_DIR, "golden-%s.log" % pool.name), "wb") as f:
            f.write(text)
    except (OSError, KeyError, TypeError, smolvm.ServeError):
        pass


def delete_pool(pool):
    if OUT_DIR:
        save_golden_log(pool)
    pool.delete()
    c = pool.client
    deadline = time.monotonic() + tail_left(5, 120)
    while c.capacity()["reclaims_pending"] and time.monotonic() < deadline:
        time.sleep(0.2)


# -- lease latency -----------------------------------------------------------------------------------

# The torch goldens load their base inside smolvm.torch.frozen(): their pools
# fork with share "on", each clone sharing the base read-only and copying only
# its own state. (Serve's default, "off", copies the whole base into every
# clone: 983 MiB of private copies per clone of the 0.5B golden, 64 of which
# did not fit an H100 80 GB on 2026-12-07.)
SHARE = "on"


def lease_golden():
    cmd = [PY, "/job/device-lease-golden.py"] + (["--no-torch"] if REHEARSE else [])
    vols = [HERE + ":/job:ro"]
    venv = os.path.dirname(os.path.dirname(PY))
    if venv not in ("/usr", "/"):
        vols.append(venv + ":" + venv + ":ro")
    return dict(cmd=cmd, volumes=vols, cuda=True, env={"PYTHONUNBUFFERED": "1"})


def server_ms(g):
    """Serve's side of one acquire beside the client's: its steps (take, persist, link, send,
    settle, total, in ms), and arrive_ms (request -> serve began it: the client's threads and
    HTTP) and back_ms (serve done -> the client had the answer); None from an older serve."""
    t = g.get("server")
    if not t:
        return None
    out = {k[:-3]: round(t[k], 2) for k in ("take_ms", "persist_ms", "link_ms", "send_ms", "settle_ms", "total_ms")
           if isinstance(t.get(k), (int, float))}
    if isinstance(t.get("received_at_ms"), (int, float)):
        out["arrive"] = round(t["received_at_ms"] - g["request"] * 1e3, 2)
        out["back"] = round((g["answered"] * 1e3 - t["received_at_ms"]) - t.get("total_ms", 0), 2)
    return out


def acquire_one(pool, i):
    """One acquire of one clone: its (request, answered, user code running) times and serve's timing."""
    t_req = time.time()
    with pool.lease(1, payload={"i": i}, wait=120) as lease:
        t_ans = time.time()
        server = lease.info.get("timing")  # serve's own account of the acquire (None: an older serve)
        res = lease.results(timeout=120)[0]
    return {"request": t_req, "answered": t_ans, "running": res["running_at"], "fork": res.get("fork"),
            "server": server}


def one_round(pool, c):
    """c acquires at once, each of one clone; per acquire (request, answered, user code running) times
    and serve's timing of it (the acquire's answer: received_at_ms, take/persist/link/send/settle/total_ms).
    ACQUIRERS=processes (the default): c client processes, as c learners' loops would be; =threads: c
    threads of this interpreter, which queue on its lock (on the 2-core CPU machine that put ~40-80 ms of
    the client's own between the request and serve)."""
    if os.environ.get("ACQUIRERS", "processes") == "threads":
        return one_round_threads(pool, c)
    import multiprocessing
    import queue
    ctx = multiprocessing.get_context("fork")
    go = ctx.Barrier(c)
    answers = ctx.Queue()

    def acquirer(i):
        try:
            go.wait(120)
            answers.put((i, acquire_one(pool, i), None))
        except Exception as e:  # noqa: BLE001 -- every failure goes into the part's errors
            answers.put((i, None, "acquire %d: %s" % (i, e)))

    procs = [ctx.Process(target=acquirer, args=(i,), daemon=True) for i in range(c)]
    for p in procs:
        p.start()
    out, errors = [None] * c, []
    for _ in range(c):
        try:
            i, got, err = answers.get(timeout=300)
        except queue.Empty:
            errors.append("%d acquirer(s) gave no answer in 300 s" % (c - sum(1 for x in out if x) - len(errors)))
            break
        out[i] = got
        if err:
            errors.append(err)
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    return out, errors


def one_round_threads(pool, c):
    out = [None] * c
    errors = []
    go = threading.Barrier(c)

    def acquire(i):
        try:
            go.wait()
            out[i] = acquire_one(pool, i)
        except Exception as e:  # noqa: BLE001 -- every failure goes into the part's errors
            errors.append("acquire %d: %s" % (i, e))

    threads = [threading.Thread(target=acquire, args=(i,)) for i in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, errors


def part_lease(a):
    conc = [int(x) for x in os.environ.get("CONCURRENCY", "1 8 64").split()]
    top = max(conc)
    c = client()
    t = time.monotonic()
    pool = c.create_pool("latency", golden=lease_golden(), min_ready=top, max=top, share=SHARE, cpus=1, ttl_s=600)
    res = {"golden": "scripts/device-lease-golden.py (qwen2.5-0.5b shape, bf16, frozen, torch's cache emptied "
                     "before the forkpoint)", "share": SHARE, "min_ready": top, "concurrency": conc,
           "acquirers": os.environ.get("ACQUIRERS", "processes"),
           "rounds": {"c%d" % k: [] for k in conc}, "errors": []}
    want = {k: env_int("ROUNDS_C1", 30) if k == 1 else env_int("ROUNDS", 20) for k in conc}
    try:
        try:
            wait_ready(pool, top, 600)
        except PoolNotReady as e:
            # The card cannot hold `top` parked clones of this golden: say so
            # and measure what fits (the record names the card and the levels).
            info = pool.refresh().info
            fit = [k for k in conc if k <= info["ready"]]
            log("%s; measuring the levels that fit: %s" % (e, fit))
            res["not_fitting"] = {"asked": top, "ready": info["ready"], "why": str(e),
                                  "skipped": [k for k in conc if k not in fit]}
            if not fit:
                raise
            conc, top = fit, info["ready"]
        res["pool_ready_s"] = round(time.monotonic() - t, 2)
        log("pool of %d ready in %.1f s" % (top, res["pool_ready_s"]))
        # The lower levels first, taking turns (c1, c8, c1, ...), each round's
        # refill a few clones (seconds); then the top level, whose refill of
        # `top` clones is bounded by the GPU's context churn (~45 s for 64 on
        # the H100 of 2026-12-07), with what is left and at least TOP_RESERVE_S
        # of it. A budget that runs out stops a level and says after how many.
        last = {k: 0.0 for k in conc}
        reserve = env_int("TOP_RESERVE_S", 150)

        def run_round(k, r):
            t_round = time.monotonic()
            got, errors = one_round(pool, k)
            t_done = time.monotonic()
            wait_ready(pool, top, 300)  # refilled (and the round's clones removed) before the next
            refill_s = time.monotonic() - t_round
            res["errors"] += ["c%d round %d: %s" % (k, r, e) for e in errors]
            lat = [(g["running"] - g["request"]) * 1e3 for g in got if g]
            res["rounds"]["c%d" % k].append({
                "latency_ms": [round(x, 2) for x in lat],
                "answered_ms": [round((g["answered"] - g["request"]) * 1e3, 2) for g in got if g],
                "server_ms": [server_ms(g) for g in got if g],
                "round_s": round(t_done - t_round, 3), "refill_s": round(refill_s, 3)})
            last[k] = time.monotonic() - t_round
            srv = [x["total"] for x in res["rounds"]["c%d" % k][-1]["server_ms"] if x and "total" in x]
            log("c%d round %d: p50 %.1f ms, max %.1f ms (serve's part: max %.1f ms), refilled in %.2f s" % (
                k, r, statistics.median(lat) if lat else -1, max(lat) if lat else -1, max(srv) if srv else -1,
                refill_s))

        lower = [k for k in conc if k != top]
        for levels, keep in ((lower, reserve if top in conc else 0), ([top], 0)):
            for r in range(max([want[k] for k in levels], default=0)):
                for k in levels:
                    if r >= want[k]:
                        continue
                    if budget_left() < last[k] + 10 + keep:
                        log("c%d: budget spent after %d rounds" % (k, r))
                        want[k] = r
                        continue
                    run_round(k, r)
    finally:
        delete_pool(pool)
    summary = {}
    for k in conc:
        lat = [x for row in res["rounds"].get("c%d" % k, []) for x in row["latency_ms"]]
        if lat:
            summary["lease_p50_ms_c%d" % k] = round(statistics.median(lat), 2)
            summary["lease_p99_ms_c%d" % k] = round(pct(lat, 99), 2)
            summary["lease_rounds_c%d" % k] = len(res["rounds"]["c%d" % k])
    top_rows = res["rounds"].get("c%d" % top, [])
    if top_rows:
        summary["refill_clones_per_s"] = round(top / statistics.median(r["refill_s"] for r in top_rows), 2)
        summary["refill_clones"] = top
    if "not_fitting" in res:
        summary["lease_levels_not_fitting"] = res["not_fitting"]["skipped"]
    summary["lease_share"] = SHARE
    res["summary"] = summary
    if res["errors"]:
        log("%d acquire errors, the first: %s" % (len(res["errors"]), res["errors"][0]))
    return res


# -- the learner: first steps, native processes ------------------------------------------------------

def learner_args(config):
    return ["--stand-in"] if REHEARSE else ["--config", config]


class Native:
    """A native learner process (grpo_learner.py --native): READY, then an ANSWER per episode line."""

    def __init__(self, config, out, env=None):
        self.p = subprocess.Popen([PY, LEARNER, "--native", "--out", out] + learner_args(config),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
        self.ready = self._line("READY ")

    def _line(self, prefix):
        for line in self.p.stdout:
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
        raise RuntimeError("native learner ended (rc %s) before '%s'" % (self.p.wait(), prefix.strip()))

    def send(self, episode):
        self.p.stdin.write(json.dumps(episode) + "\n")
        self.p.stdin.flush()

    def answer(self):
        return self._line("ANSWER ")

    def close(self):
        """Ends it (it saves its adapters); its last answer."""
        self.p.stdin.write("\n")
        self.p.stdin.close()
        last = self.answer()
        self.p.wait(timeout=120)
        return last


def shim_env():
    """This environment plus what `smolvm cuda env` prints for serve's daemon: a host process whose CUDA
    goes through the shims, as a clone's does, but forked from nothing. --start: the daemon may have
    idled out since the pools went (device-lease.sh's exit shuts down whichever runs)."""
    text = subprocess.run([os.environ["SMOLVM_BIN"], "cuda", "env", "--start"], check=True, capture_output=True,
                          text=True).stdout
    env = dict(os.environ)
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            k, v = line[len("export "):].split("=", 1)
            env[k] = v.strip("'")
    return env


def learner_pool(c, name, config, k, out, warmup=True):
    args = ["--learners", str(k), "--python", PY, "--out", out, "--pool", name] + learner_args(config)
    if not warmup:
        args.append("--no-warmup")
    a = grpo_loop.parse_args(args)
    return c.create_pool(name, golden=grpo_loop.golden_of(a, out), min_ready=k, share=grpo_loop.share_of(a), cpus=1,
                         ttl_s=900)


def native_first_episode(out, episode, label, env=None):
    """One native learner process (env: its environment) trains `episode`: its row of the part."""
    p = Native("qwen2.5-0.5b", out, env=env)
    p.send(episode)
    ans = p.answer()
    p.close()
    log("%s: load %.1f s, first step %.3f s, then %.3f s" % (label, p.ready["load_s"], ans["step_s"][0],
                                                              ans["step_s"][1]))
    return {"step_s": ans["step_s"], "losses": ans["losses"], "load_s": p.ready["load_s"], "digest": ans.get("digest")}


def part_first_step(a):
    n = env_int("N_FIRST", 3)
    out = os.path.join(a.work, "adapters")
    os.makedirs(out, exist_ok=True)
    os.chmod(out, 0o777)
    c = client()
    pools = {"warm": learner_pool(c, "fs-warm", "qwen2.5-0.5b", n, out),
             "no_warmup": learner_pool(c, "fs-cold", "qwen2.5-0.5b", n, out, warmup=False)}
    res = {"model": "qwen2.5-0.5b bf16", "episode": "DPO, 8 steps of 2x256", "clones": {}, "native": []}
    episode = grpo_loop.make_episode(0, 0)
    try:
        for name, pool in pools.items():
            wait_ready(pool, n, 600, settled=False)
            rows = []
            for i in range(n):  # one at a time: each first step alone on the GPU, as the native ones
                with pool.lease(1, payload=episode, wait=300) as lease:
                    ans = lease.results(timeout=300)[0]
                rows.append({"step_s": ans["step_s"], "losses": ans["losses"], "fork": ans.get("fork"),
                             "digest": ans.get("digest")})
                log("clone (%s) %d: first step %.3f s, then %.3f s" % (name, i, ans["step_s"][0], ans["step_s"][1]))
            res["clones"][name] = rows
    finally:
        for pool in pools.values():
            delete_pool(pool)
    for i in range(n):
        if budget_left() < 60:
            log("native: budget spent after %d" % i)
            break
        res["native"].append(native_first_episode(out, episode, "native %d" % i))
    # The same learner through the shims without a fork: which of the two (the shims, the fork) a
    # difference of the clones' first update from native's comes from.
    res["shim"] = []
    if budget_left() >= 60:
        res["shim"].append(native_first_episode(out, episode, "shim (no fork)", env=shim_env()))
    first = {k: statistics.median(r["step_s"][0] for r in rows) for k, rows in res["clones"].items()}
    native = statistics.median(r["step_s"][0] for r in res["native"])
    later_native = statistics.median(s for r in res["native"] for s in r["step_s"][1:])
    later_clone = statistics.median(s for r in res["clones"]["warm"] for s in r["step_s"][1:])
    res["summary"] = {
        "first_step_s_native": round(native, 4), "first_step_s_clone": round(first["warm"], 4),
        "first_step_s_clone_no_warmup": round(first["no_warmup"], 4),
        "first_step_ratio": round(first["warm"] / native, 3),
        "first_step_ratio_no_warmup": round(first["no_warmup"] / native, 3),
        "later_step_s_native": round(later_native, 4), "later_step_s_clone": round(later_clone, 4),
        # The warm-up is undone: the first episode's losses are the same with and without it, and natively
        # (the native learner does clone 0's work before its first episode: smolvm.native_forkpoint).
        "first_episode_losses_equal": all(r["losses"] == res["native"][0]["losses"]
                                          for rows in res["clones"].values() for r in rows),
    }
    res["summary"].update(digests_agree(res))
    if res["shim"] and res["native"]:
        # Through the shims without a fork: the same update as native's (then the fork makes the
        # difference) or as the clones' (then the shims do).
        after = (res["shim"][0].get("digest") or {}).get("after_first_step")
        res["summary"]["shim_update_equals_native"] = after == (res["native"][0].get("digest") or {}).get("after_first_step")
        res["summary"]["shim_update_equals_clone"] = after == (res["clones"]["warm"][0].get("digest") or {}).get("after_first_step")
        res["summary"]["shim_losses_equal_native"] = res["shim"][0]["losses"] == res["native"][0]["losses"]
    if not res["summary"]["first_episode_losses_equal"]:
        log("first episode's losses: clone %s, native %s; %s" % (
            res["clones"]["warm"][0]["losses"], res["native"][0]["losses"],
            {k: v for k, v in res["summary"].items() if k.startswith("first_episode_")}))
    return res


def digests_agree(res):
    """Did every clone start from the native learner's weights, and its first step leave the same ones?"""
    native = (res["native"] or [{}])[0].get("digest")
    rows = [r.get("digest") for rows in res["clones"].values() for r in rows]
    if not native or not all(rows):
        return {"first_episode_adapters_equal": None, "first_episode_base_equal": None,
                "first_step_update_equal": None}
    return {"first_episode_adapters_equal": all(d["before"]["adapters"] == native["before"]["adapters"] for d in rows),
            "first_episode_base_equal": all(d["before"]["base"] == native["before"]["base"] for d in rows),
            "first_step_update_equal": all(d.get("after_first_step") == native.get("after_first_step") for d in rows)}


# -- the loop, forked and native ---------------------------------------------------------------------

def part_loop(a, config, iterations):
    k = env_int("K", 16)
    out = os.path.join(a.work, "adapters-" + config)
    os.makedirs(out, exist_ok=True)
    margin = 60 if config.endswith("7b") else 30
    args = ["--learners", str(k), "--iterations", str(iterations), "--python", PY, "--out", out,
            "--socket", os.path.join(os.environ["SMOLVM_HOME"], "serve.sock"), "--pool", "loop",
            "--ready-timeout", str(max(30, min(600, budget_left() - margin))), "--episode-timeout", "600",
            "--max-seconds", str(max(1, budget_left() - margin)), "--keep-pool"] + learner_args(config)
    c = client()
    try:
        s = grpo_loop.run(grpo_loop.parse_args(args))
    finally:  # the pool kept: its golden's log first (a clone that failed its warm-up is quoted there)
        try:
            pool = c.pool("loop")
        except smolvm.ServeError:
            pool = None
        if pool is not None:
            delete_pool(pool)
    deadline = time.monotonic() + tail_left(5, 120)
    while c.capacity()["reclaims_pending"] and time.monotonic() < deadline:
        time.sleep(0.2)
    s["summary"] = {"tok_s": s["tok_s"], "iterations_done": s["iterations_done"], "learners": k,
                    "pool_ready_s": s["pool_ready_s"]}
    return s


def native_rows(answers_by_iteration, seconds):
    rows = []
    for it, (answers, dt) in enumerate(zip(answers_by_iteration, seconds)):
        n = sum(x["tokens"] for x in answers)
        rows.append({"iteration": it, "tokens": n, "seconds": round(dt, 3), "tok_s": round(n / dt, 1),
                     "mean_loss": sum(x["losses"][-1] for x in answers) / len(answers)})
    return rows


def part_loop_kept(a):
    k, iterations = env_int("K", 16), env_int("ITERATIONS", 10)
    out = os.path.join(a.work, "adapters-kept")
    os.makedirs(out, exist_ok=True)
    t = time.monotonic()
    procs = [None] * k

    def start(i):
        procs[i] = Native("qwen2.5-0.5b", out)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(k)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    load_s = time.monotonic() - t
    log("%d native learners loaded in %.1f s" % (k, load_s))
    answers, seconds = [], []
    t_loop = time.monotonic()
    for it in range(iterations):
        if it and budget_left() < seconds[-1] + 30:
            log("kept: budget spent after %d iterations" % it)
            break
        t_it = time.monotonic()
        for i, p in enumerate(procs):
            p.send(grpo_loop.make_episode(i, it))
        answers.append([p.answer() for p in procs])
        seconds.append(time.monotonic() - t_it)
        log("kept iteration %d: %.1f s" % (it, seconds[-1]))
    loop_s = time.monotonic() - t_loop
    for p in procs:
        p.close()
    rows = native_rows(answers, seconds)
    tokens = sum(r["tokens"] for r in rows)
    return {"learners": k, "load_s": round(load_s, 2), "per_iteration": rows, "loop_s": round(loop_s, 3),
            "summary": {"tok_s": round(tokens / loop_s, 1), "iterations_done": len(rows), "learners": k}}


def part_loop_cold(a):
    k, iterations = env_int("K", 16), env_int("ITERATIONS", 10)
    out = os.path.join(a.work, "adapters-cold")
    os.makedirs(out, exist_ok=True)
    answers, seconds = [], []
    t_loop = time.monotonic()
    for it in range(iterations):
        if it and budget_left() < seconds[-1] + 30:
            log("cold: budget spent after %d iterations" % it)
            break
        t_it = time.monotonic()
        got = [None] * k

        def one(i):  # a process per learner and iteration: load, train its episode, save, exit
            p = Native("qwen2.5-0.5b", out)
            p.send(grpo_loop.make_episode(i, it))
            got[i] = p.answer()
            p.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(k)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if any(g is None for g in got):
            raise RuntimeError("cold iteration %d: a learner gave no answer" % it)
        answers.append(got)
        seconds.append(time.monotonic() - t_it)
        log("cold iteration %d: %.1f s" % (it, seconds[-1]))
    loop_s = time.monotonic() - t_loop
    rows = native_rows(answers, seconds)
    tokens = sum(r["tokens"] for r in rows)
    return {"learners": k, "per_iteration": rows, "loop_s": round(loop_s, 3),
            "note": "each iteration's processes load the base and start fresh adapters (loading the previous "
                    "iteration's adapters is left out: it favours this arm); each saves its adapters at exit",
            "summary": {"tok_s": round(tokens / loop_s, 1), "iterations_done": len(rows), "learners": k}}


# -- the record --------------------------------------------------------------------------------------

def part_record(a):
    parts = {}
    for p in PARTS:
        path = os.path.join(a.state, p + ".json")
        if os.path.exists(path):
            with open(path) as f:
                parts[p] = json.load(f)
    missing = [p for p in PARTS if p not in parts]
    if missing:
        log("no record yet: parts missing: %s (in %s)" % (" ".join(missing), a.state))
        return 3
    s = {}
    for p in ("lease", "first-step"):
        s.update(parts[p]["summary"])
    fork, kept, cold = (parts[p]["summary"]["tok_s"] for p in ("loop", "loop-kept", "loop-cold"))
    s.update({"loop_tok_s_fork": fork, "loop_tok_s_kept_alive": kept, "loop_tok_s_cold": cold,
              "loop_ratio_kept_alive": round(fork / kept, 3), "loop_ratio_cold": round(fork / cold, 3),
              "loop_iterations": {p: parts[p]["summary"]["iterations_done"] for p in ("loop", "loop-kept", "loop-cold")},
              "loop_learners": parts["loop"]["summary"]["learners"],
              "loop7b_tok_s_fork": parts["loop7b"]["summary"]["tok_s"],
              "loop7b_iterations": parts["loop7b"]["summary"]["iterations_done"],
              "memory_back": all(parts[p].get("memory", {}).get("back") is not False for p in PARTS),
              "cards": sorted({parts[p].get("card", "?") for p in PARTS}),
              "rehearsal": any(parts[p].get("rehearsal") for p in PARTS)})
    s["goals"] = {"lease_p99_ms_c64_le_50": s.get("lease_p99_ms_c64", 1e9) <= 50,
                  "first_step_ratio_le_1.2": s["first_step_ratio"] <= 1.2,
                  "loop_ratio_kept_alive_ge_0.95": s["loop_ratio_kept_alive"] >= 0.95,
                  "loop_ratio_cold_ge_5": s["loop_ratio_cold"] >= 5, "memory_back": s["memory_back"]}
    files = [os.path.join(a.state, p + ".json") for p in PARTS]
    cmd = [sys.executable, os.path.join(HERE, "device-record.py"), "lease", "--out", a.out, "--command",
           "scripts/device-lease.sh (parts: %s)" % " ".join(PARTS), "--summary", json.dumps(s)] + files
    return subprocess.run(cmd).returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=PARTS + ["record"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--work", default="/tmp")
    a = ap.parse_args()
    os.makedirs(a.state, exist_ok=True)
    global OUT_DIR
    OUT_DIR = a.out
    if a.part == "record":
        return part_record(a)
    run = {"lease": part_lease, "first-step": part_first_step,
           "loop": lambda a: part_loop(a, "qwen2.5-0.5b", env_int("ITERATIONS", 10)),
           "loop-kept": part_loop_kept, "loop-cold": part_loop_cold,
           "loop7b": lambda a: part_loop(a, "qwen2.5-7b", env_int("ITERATIONS_7B", 3))}[a.part]
    # The level memory must come back to: the warm daemon's (device-lease.sh
    # measured it before serve's first pool), else what is used now.
    level = int(os.environ["WARM_MIB"]) if os.environ.get("WARM_MIB") else smi_used()
    res = run(a)
    res.update({"part": a.part, "card": card(), "rehearsal": REHEARSE, "python": PY,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "memory": memory_check(level)})
    log("memory: %s" % res["memory"])
    text = json.dumps(res, indent=1)
    for d in (a.state, os.path.join(a.out, "parts")):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, a.part + ".json"), "w") as f:
            f.write(text + "\n")
    log("%s: %s" % (a.part, json.dumps(res.get("summary"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
