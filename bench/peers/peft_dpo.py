#!/usr/bin/env python3
"""The torch learner: smolvm-learner's twin in PyTorch + transformers + PEFT.

It speaks the learner's contract (docs/learner.md), so `smolvm bench run
--learner torch` runs it in both arms exactly where it runs smolvm-learner:

* data: smolvm-learner's seeded arithmetic preference pairs (learner_data.py,
  checked against `smolvm-learner batches` in CI), learner `--lid` under
  `--seed`; DPO rows unpacked (2n rows of --maxseq byte tokens);
* flags and the seed's environment variables: --model (MODEL), --steps
  (STEPS), --batch (BATCH), --maxseq (MAXSEQ), --lid (LEARNER_ID), --coord
  (COORD), --arm (ARM), --beta (DPO_BETA), --seed, --lr, --lora-r,
  --lora-alpha, --device cuda, --method dpo;
* events: <coord>/learner_<lid>.jsonl and stdout, `ready` {lid, arm, load_ms,
  device}, `step` {lid, step, loss, ms}, `done` {lid, arm, tok_s, train_s,
  step_ms, loss0, lossN, losses, peak_gb, ...}, each with `t` (unix s);
* --fork: the golden. Loads the base under smolvm.torch.frozen() (its own
  allocations, marked frozen: clones share them read-only), adds the LoRA
  adapters and the optimizer, warms up with forward passes only (no
  backward: the fork rules, docs/torch.md), then waits at
  smolvm.forkpoint(); each clone trains as learner <clone index>. A
  released golden exits 0.

The same LoRA as smolvm-learner (r, alpha, q/k/v/o/gate/up/down, B = 0 at
init; A from torch's generator seeded with --seed, so every learner of a run
starts from the same adapters), the DPO loss written in torch (trl is not
installed): reference = the same base with adapters disabled, summed
completion log-probs, -logsigmoid(beta * margin). bf16 weights, gradient
checkpointing on, AdamW.

The base is a model directory (--model, from_pretrained: what
`smolvm-learner make-model` writes) or, with --config, Qwen2.5-0.5B's or 7B's
shapes with seeded random weights initialised on the GPU (no files).

--probe prints what the bench needs to know about this Python (torch,
transformers and peft versions, the site-packages directory) as one JSON
line, or says which import fails.

SMOLVM_TORCH_DRY_RUN=1 (tests of the bench's plumbing, where there is no
torch): everything but torch -- the flags, the learner's batches, the events,
--fork through smolvm.forkpoint(), exit codes -- with each step's "loss" a
function of its batch's tokens (so learners with the same lid agree), any
--device.

Exit codes: 0 done (a released golden too); 1 training failed (a non-finite
loss included) or the fork controller refused; 2 invalid arguments; 3 torch,
transformers or peft not importable.
--out FILE also writes the result (the done event's fields and more) as one
JSON line, as scripts/device-torch-dpo.sh reads it; through the smolvm shims
it holds shim_round_trips, the round trips per warm step by op.
"""
import argparse
import contextlib
import ctypes
import json
import math
import os
import sys
import sysconfig
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import learner_data  # noqa: E402

EXIT_FAILED, EXIT_USAGE, EXIT_NO_TORCH = 1, 2, 3

# Shapes of the released checkpoints (their config.json); weights random.
CONFIGS = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}


def import_torch():
    """(torch, transformers, peft), or a message naming what is missing."""
    try:
        import torch
        import transformers
        import peft
    except ImportError as e:
        return None, ("torch is not importable by %s: %s (give the bench --python a venv's python with torch, "
                      "transformers and peft)" % (sys.executable, e))
    return (torch, transformers, peft), None


def fork_error_text(e):
    """smolvm.ForkError's message without OSError's "[Errno N]" prefix."""
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def dry_run():
    return os.environ.get("SMOLVM_TORCH_DRY_RUN") == "1"


def probe():
    if dry_run():
        print(json.dumps({"python": sys.executable, "torch": "none (dry run)", "transformers": "-", "peft": "-",
                          "purelib": sysconfig.get_paths()["purelib"], "base_prefix": sys.base_prefix,
                          "prefix": sys.prefix}))
        return 0
    mods, why = import_torch()
    if why:
        print(why, file=sys.stderr)
        return EXIT_NO_TORCH
    torch, transformers, peft = mods
    print(json.dumps({"python": sys.executable, "torch": torch.__version__, "transformers": transformers.__version__,
                      "peft": peft.__version__, "purelib": sysconfig.get_paths()["purelib"],
                      "base_prefix": sys.base_prefix, "prefix": sys.prefix}))
    return 0


class EventLog:
    """learner_<lid>.jsonl in the coord directory (when given) and stdout, as smolvm-learner writes them."""

    def __init__(self, coord, lid):
        self.f = None
        if coord:
            os.makedirs(coord, exist_ok=True)
            self.f = open(os.path.join(coord, "learner_%d.jsonl" % lid), "a")

    def emit(self, **event):
        event["t"] = time.time()
        line = json.dumps(event) + "\n"
        if self.f:
            self.f.write(line)
            self.f.flush()
        sys.stdout.write(line)
        sys.stdout.flush()


class ShimCounters:
    """The smolvm cudart shim's per-op counters (absent natively)."""

    SLOTS = 1024

    def __init__(self):
        try:
            lib = ctypes.CDLL(None)
            self.fn = lib.smolvm_shim_op_counts
            self.name = lib.smolvm_shim_op_name
        except (OSError, AttributeError):
            self.fn = None
            return
        self.fn.restype = ctypes.c_size_t
        self.fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.name.restype = ctypes.c_char_p
        self.name.argtypes = [ctypes.c_uint32]

    def read(self):
        """(round trips by op, queued ops by op) as lists, or None natively."""
        if self.fn is None:
            return None
        sync = (ctypes.c_uint64 * self.SLOTS)()
        queued = (ctypes.c_uint64 * self.SLOTS)()
        n = min(self.fn(sync, queued, self.SLOTS), self.SLOTS)
        return list(sync[:n]), list(queued[:n])

    def per_step(self, a, b, steps):
        if a is None or b is None or steps <= 0:
            return None
        by_op = {}
        for op, (x, y) in enumerate(zip(a[0], b[0])):
            if y > x:
                by_op[self.name(op).decode()] = round((y - x) / steps, 2)
        queued = sum(b[1]) - sum(a[1])
        return {"per_step": round(sum(by_op.values()), 2), "queued_per_step": round(queued / steps, 1),
                "by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1]))}


def build_from_config(torch, name):
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, hidden_act="silu",
                      use_cache=False, **CONFIGS[name])
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.bfloat16)  # initialised in bf16 (else fp32, then cast)
    except (TypeError, RuntimeError):
        pass
    try:
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(old)
    return model.to(torch.bfloat16)


def load_base(torch, a):
    if a.config:
        return build_from_config(torch, a.config)
    from transformers import AutoModelForCausalLM

    kw = {"attn_implementation": "sdpa"}
    try:  # straight onto the GPU (accelerate's loader); else through host memory, once per learner
        import accelerate  # noqa: F401

        kw["device_map"] = "cuda"
    except ImportError:
        pass
    try:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, **kw)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16, **kw)
    return model.to("cuda", torch.bfloat16)  # a no-op when the loader already put bf16 weights there


class Batches:
    """The learner's batches as CUDA tensors: tokens (2n, seq) and the scored
    positions (row, column, target, example) of each completion token."""

    def __init__(self, torch, seed, lid, n, seq):
        self.torch = torch
        self.data = learner_data.PreferenceData(seed, lid)
        self.n, self.seq = n, seq

    def next(self):
        t = self.torch
        b = learner_data.dpo_batch(self.data, self.n, self.seq)
        tokens = t.tensor(b["tokens"], dtype=t.long).view(b["rows"], b["seq"])
        pos = t.tensor(b["score_pos"], dtype=t.long)
        idx = t.stack([pos // b["seq"], pos % b["seq"], t.tensor(b["score_target"], dtype=t.long),
                       t.tensor(b["score_example"], dtype=t.long)])
        return tokens.cuda(non_blocking=True), idx.cuda(non_blocking=True), b["completion_start"]


def completion_logps(torch, model, tokens, idx, completion_start, keep):
    """Sum of log p(completion tokens) per row (4 rows: chosen..., rejected...).
    keep='all' computes every position's logits (trl's default); 'completion'
    asks the model for only the positions that score (logits_to_keep)."""
    rows, cols, target, example = idx
    if keep == "completion":
        first = completion_start - 1
        logits = model(input_ids=tokens, logits_to_keep=tokens.shape[1] - first).logits  # (R, T-first, V)
        cols = cols - first
    else:
        logits = model(input_ids=tokens).logits  # (R, T, V)
    lp = torch.log_softmax(logits[rows, cols].float(), dim=-1)  # (S, V): the scoring positions only
    lp = lp.gather(1, target.unsqueeze(1)).squeeze(1)  # (S)
    return torch.zeros(tokens.shape[0], device=lp.device, dtype=lp.dtype).index_add(0, example, lp)


def env_default(name, fallback, kind=int):
    v = os.environ.get(name)
    return kind(v) if v not in (None, "") else fallback


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", action="store_true", help="print torch/transformers/peft versions and site-packages")
    ap.add_argument("--model", default=os.environ.get("MODEL") or None, help="a model directory (from_pretrained)")
    ap.add_argument("--config", choices=sorted(CONFIGS), help="random weights of this shape, built on the GPU")
    ap.add_argument("--lid", type=int, default=env_default("LEARNER_ID", 0), help="learner id (seeds the data)")
    ap.add_argument("--coord", default=os.environ.get("COORD", ""), help="directory for learner_<lid>.jsonl")
    ap.add_argument("--arm", default=os.environ.get("ARM", "native"), help="bench arm name echoed in events")
    ap.add_argument("--fork", action="store_true", help="load, warm up, wait at smolvm.forkpoint()")
    ap.add_argument("--device", default="cuda", help="cuda (the only device this learner runs on)")
    ap.add_argument("--method", default="dpo", help="dpo (the only method this learner runs)")
    ap.add_argument("--batch", type=int, default=env_default("BATCH", 2))
    ap.add_argument("--maxseq", type=int, default=env_default("MAXSEQ", 256))
    ap.add_argument("--steps", type=int, default=env_default("STEPS", 20))
    ap.add_argument("--warmup", type=int, default=2, help="steps left out of tok_s_warm")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=16)
    ap.add_argument("--beta", type=float, default=env_default("DPO_BETA", 0.1, float))
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-logits", choices=["all", "completion"], default="all")
    ap.add_argument("--no-checkpointing", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    if a.probe:
        return a, None
    if bool(a.model) == bool(a.config):
        return a, "give one of --model DIR (or MODEL) and --config"
    if a.device != "cuda" and not dry_run():
        return a, "--device %s: the torch learner runs on cuda only" % a.device
    if a.method != "dpo":
        return a, "--method %s: the torch learner runs dpo only" % a.method
    if a.steps < 1 or a.batch < 1:
        return a, "--steps and --batch must be at least 1"
    if a.maxseq < learner_data.min_seq_len():
        return a, "--maxseq %d is below the shortest example (%d)" % (a.maxseq, learner_data.min_seq_len())
    if a.model and not os.path.isdir(a.model):
        return a, "--model %s: no such directory (make one: smolvm-learner make-model)" % a.model
    return a, None


def no_tqdm_monitor():
    """tqdm's progress bars (transformers' "Loading weights") start a monitor
    thread that a clone would not have (forkpoint() warns about it): none is
    started from here on (monitor_interval 0, on every bar class), and one
    already running is stopped and joined."""
    try:
        import threading

        import tqdm
        from tqdm._monitor import TMonitor
    except ImportError:
        return
    classes = [tqdm.tqdm]
    while classes:
        cls = classes.pop()
        cls.monitor_interval = 0
        classes.extend(cls.__subclasses__())
    for t in threading.enumerate():
        if isinstance(t, TMonitor):
            t.exit()  # sets its stop flag and joins it


def at_forkpoint(a):
    """smolvm.forkpoint(): (the clone's lid, None) in a clone; (None, the exit
    code) in the golden once released, or when a fork rule was broken. The
    golden prints what its clones will copy (torch's memory by pool)."""
    import smolvm

    no_tqdm_monitor()
    try:
        index = smolvm.forkpoint(seed=a.seed, memory_report=True)
    except (smolvm.ForkError, smolvm.ForkRuleError) as e:
        print("peft_dpo: --fork: %s" % fork_error_text(e), file=sys.stderr)
        return None, EXIT_FAILED
    if index is None:
        print("peft_dpo: golden released from its forkpoint", file=sys.stderr)
        return None, 0
    t = smolvm.fork_timing()
    if t:
        print("peft_dpo: clone %d: fork order to os.fork %.1f ms, os.fork %.1f ms, child to attached %.1f ms, "
              "become_clone %.1f ms" % (index, t["prepare_ms"], t["os_fork_ms"], t["child_ms"], t["become_clone_ms"]),
              file=sys.stderr, flush=True)
    return index, None


def train_dry(a):
    """SMOLVM_TORCH_DRY_RUN=1: the contract without torch (see the module's doc)."""
    t_start = time.monotonic()
    lid = a.lid
    if a.fork:
        lid, rc = at_forkpoint(a)
        if rc is not None:
            return rc
    log = EventLog(a.coord, lid)
    log.emit(event="ready", lid=lid, arm=a.arm, load_ms=(time.monotonic() - t_start) * 1e3, device=a.device,
             impl="dry-run")
    data = learner_data.PreferenceData(a.seed, lid)
    losses, step_ms = [], []
    for step in range(a.steps):
        ts = time.monotonic()
        b = learner_data.dpo_batch(data, a.batch, a.maxseq)
        losses.append(sum(b["score_target"]) / (1000.0 * len(b["score_target"])))
        time.sleep(0.01)
        step_ms.append((time.monotonic() - ts) * 1e3)
        log.emit(event="step", lid=lid, step=step, loss=losses[-1], ms=step_ms[-1])
    train_s = sum(step_ms) / 1e3
    log.emit(event="done", lid=lid, arm=a.arm, tok_s=a.steps * a.batch * a.maxseq / train_s, train_s=train_s,
             step_ms=train_s * 1e3 / a.steps, loss0=losses[0], lossN=losses[-1], losses=losses,
             losses_hex=[x.hex() for x in losses], peak_gb=0.0, impl="dry-run")
    return 0


def main(argv=None):
    a, bad = parse_args(sys.argv[1:] if argv is None else argv)
    if a.probe:
        return probe()
    if bad:
        print("peft_dpo: " + bad, file=sys.stderr)
        return EXIT_USAGE
    if dry_run():
        return train_dry(a)
    mods, why = import_torch()
    if why:
        print("peft_dpo: " + why, file=sys.stderr)
        return EXIT_NO_TORCH
    torch = mods[0]
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model

    # The fork rules (docs/torch.md): torch's CPU threads at 1 until the fork,
    # before its first operation; each clone gets its CPUs back.
    torch.set_num_threads(1 if a.fork else max(1, len(os.sched_getaffinity(0))))
    t_start = time.monotonic()
    torch.manual_seed(a.seed)
    frozen = contextlib.nullcontext()
    if a.fork:
        import smolvm
        import smolvm.torch

        no_tqdm_monitor()
        frozen = smolvm.torch.frozen()
    with frozen:  # the golden's base weights in their own allocations (any thread's), marked frozen on leaving
        model = load_base(torch, a)
    base_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if a.fork:
        outside = smolvm.torch.outside_frozen(model)
        print("peft_dpo: golden: base %.1f MiB, %.1f MiB of it outside frozen memory (%d tensors%s)" % (
            base_bytes / 2**20, sum(n for _, n in outside) / 2**20, len(outside),
            (": " + ", ".join(name for name, _ in outside[:3]) + (", ..." if len(outside) > 3 else ""))
            if outside else ""), flush=True)
    model.config.use_cache = False
    if not a.no_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    torch.manual_seed(a.seed)  # LoRA A from the seed, however the base was made
    cfg = LoraConfig(r=a.lora_r, lora_alpha=a.lora_alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, cfg)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    lid = a.lid
    if a.fork:
        # Warm-up without a backward (a backward before the fork breaks every
        # clone's): kernels, cuBLAS/cuDNN handles and plans, on lid -2's data.
        tokens, idx, start = Batches(torch, a.seed, -2, a.batch, a.maxseq).next()
        with torch.no_grad():
            with model.disable_adapter():
                completion_logps(torch, model, tokens, idx, start, a.keep_logits)
            completion_logps(torch, model, tokens, idx, start, a.keep_logits)
        del tokens, idx
        torch.cuda.synchronize()
        print("peft_dpo: golden loaded in %.1f s (base %.0f MiB frozen); waiting at the forkpoint" % (
            time.monotonic() - t_start, base_bytes / 2**20), flush=True)
        lid, rc = at_forkpoint(a)
        if rc is not None:
            return rc
    load_ms = (time.monotonic() - t_start) * 1e3

    log = EventLog(a.coord, lid)
    log.emit(event="ready", lid=lid, arm=a.arm, load_ms=load_ms, device="cuda", impl="torch")
    data = Batches(torch, a.seed, lid, a.batch, a.maxseq)
    losses, step_ms = [], []
    counters = ShimCounters()
    warm_counts = None
    for step in range(a.steps):
        if step == a.warmup:
            warm_counts = counters.read()
        ts = time.monotonic()
        tokens, idx, start = data.next()
        with torch.no_grad(), model.disable_adapter():
            ref = completion_logps(torch, model, tokens, idx, start, a.keep_logits)
        pol = completion_logps(torch, model, tokens, idx, start, a.keep_logits)
        n = a.batch
        margin = (pol[:n] - ref[:n]) - (pol[n:] - ref[n:])
        loss = -F.logsigmoid(a.beta * margin).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # syncs, like the learner's per-step loss read-back
        step_ms.append((time.monotonic() - ts) * 1e3)
        log.emit(event="step", lid=lid, step=step, loss=losses[-1] if math.isfinite(losses[-1]) else None,
                 ms=step_ms[-1])
    round_trips = counters.per_step(warm_counts, counters.read(), a.steps - a.warmup)
    train_s = sum(step_ms) / 1e3
    warm = step_ms[a.warmup:] if a.steps > a.warmup else step_ms
    finite = [x if math.isfinite(x) else None for x in losses]
    done = {
        "lid": lid,
        "arm": a.arm,
        "tok_s": a.steps * a.batch * a.maxseq / train_s,
        "train_s": train_s,
        "step_ms": train_s * 1e3 / a.steps,
        "loss0": finite[0],
        "lossN": finite[-1],
        "losses": finite,
        "losses_hex": [x.hex() for x in losses],
        "peak_gb": torch.cuda.max_memory_allocated() / 2**30,
        "tok_s_warm": len(warm) * a.batch * a.maxseq / (sum(warm) / 1e3),
        "step_ms_warm": sum(warm) / len(warm),
        "base_bytes": base_bytes,
        "impl": "torch",
        "torch": torch.__version__,
    }
    log.emit(event="done", **done)
    if a.out:
        res = dict(done, model=a.model or a.config, batch=a.batch, maxseq=a.maxseq, steps=a.steps,
                   keep_logits=a.keep_logits, checkpointing=not a.no_checkpointing, load_s=load_ms / 1e3,
                   shim_round_trips=round_trips)
        with open(a.out, "w") as f:
            f.write(json.dumps(res) + "\n")
    if not all(math.isfinite(x) for x in losses):
        print("peft_dpo: loss became non-finite", file=sys.stderr)
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
