"""The torch suite: one unmodified program, run natively and in a --cuda
machine by scripts/device-torch-suite.sh. Usage: suite.py OUT_DIR

Saves every result tensor to OUT_DIR/tensors.pt (compare.py compares runs)
and prints:
  TIME import_torch_s=S      import torch (and torchvision) took S seconds
  RESULT name ...            values that must agree between runs
  STATS key value            allocator figures (reported, not judged)
  MAPPED path                every NVIDIA library the process has mapped
  PROBE name ok|error ...    with SUITE_PROBES=1, after the rest, each in its
                             own process (probes.py): CUDA graphs,
                             torch.compile, NCCL (not supported through the
                             shims: each must fail at once, never hang)
  PROBE-NAMED name: lines    the shims' "smolvm ...: X is not supported" lines
                             on that probe's stderr
  ERROR what: message        a part that failed (the exit code is then 1)
"""
import contextlib
import os
import sys
import time

out_dir = sys.argv[1]
t0 = time.perf_counter()
import torch  # noqa: E402
import torchvision  # noqa: E402,F401  (it bundles its own libcudart: must not be what runs)
print(f"TIME import_torch_s={time.perf_counter() - t0:.3f}", flush=True)

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

errors = 0
saved = {}


def keep(name, t):
    saved[name] = t.detach().float().cpu() if t.is_floating_point() else t.detach().cpu()


def part(name):
    def wrap(fn):
        global errors
        try:
            fn()
        except Exception as e:  # each part reports and the others still run
            errors += 1
            print(f"ERROR {name}: {type(e).__name__}: {str(e)[:400]}", flush=True)
        return fn
    return wrap


print("RESULT versions", torch.__version__, torchvision.__version__, torch.version.cuda,
      torch.backends.cudnn.version(), torch.cuda.get_device_name(0), flush=True)
dev = "cuda"


@part("matmul")
def _():
    g = torch.Generator(device=dev).manual_seed(1)
    a = torch.randn(512, 768, device=dev, generator=g)
    b = torch.randn(768, 384, device=dev, generator=g)
    torch.set_float32_matmul_precision("highest")
    keep("matmul_fp32", a @ b)
    torch.set_float32_matmul_precision("high")  # TF32
    keep("matmul_tf32", a @ b)
    torch.set_float32_matmul_precision("highest")
    keep("matmul_bf16", a.bfloat16() @ b.bfloat16())
    keep("matmul_fp16", a.half() @ b.half())
    keep("bmm_bf16", torch.bmm(a.view(4, 128, 768).bfloat16(), b.bfloat16().expand(4, 768, 384)))
    keep("addmm_bias_fp32", torch.addmm(b[0], a, b))


@part("train")
def _():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(512, 256)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(64, 256, device=dev)
    t = torch.randn(64, 256, device=dev)
    losses = []
    for _ in range(5):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(m(x).float(), t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    keep("train_losses", torch.stack(losses))
    keep("train_weight0", m[0].weight)
    keep("train_weight3", m[3].weight)
    print("RESULT train_losses", [f"{float(v):.9g}" for v in losses], flush=True)


def sdpa(name, backend, dropout_p=0.0):
    @part("sdpa_" + name)
    def _():
        torch.manual_seed(2)
        q, k, v = (torch.randn(2, 8, 256, 64, device=dev, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        gout = torch.randn(2, 8, 256, 64, device=dev, dtype=torch.bfloat16)
        ctx = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
        with ctx:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
            o.backward(gout)
        keep(f"sdpa_{name}_out", o)
        keep(f"sdpa_{name}_dq", q.grad)
        keep(f"sdpa_{name}_dv", v.grad)


sdpa("default", None)
sdpa("cudnn", SDPBackend.CUDNN_ATTENTION)
sdpa("flash", SDPBackend.FLASH_ATTENTION)
sdpa("efficient", SDPBackend.EFFICIENT_ATTENTION)
sdpa("math", SDPBackend.MATH)
sdpa("flash_dropout", SDPBackend.FLASH_ATTENTION, dropout_p=0.1)


@part("dropout")
def _():
    torch.manual_seed(3)
    x = torch.randn(1 << 16, device=dev)
    keep("dropout", F.dropout(x, 0.3, training=True))


@part("pinned")
def _():
    torch.manual_seed(4)
    h = torch.randn(1 << 20).pin_memory()
    d = h.to(dev, non_blocking=True)
    back = torch.empty_like(h).pin_memory()
    back.copy_(d * 2 + 1, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    keep("pinned_roundtrip", back)
    print("RESULT pinned_exact", bool(torch.equal(back, h * 2 + 1)), flush=True)


@part("streams")
def _():
    torch.manual_seed(5)
    x = torch.randn(1024, 1024, device=dev)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    e0.record()
    s1.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s1):
        y1 = x @ x
        e1.record()
    s2.wait_event(e1)
    with torch.cuda.stream(s2):
        y1.record_stream(s2)
        y2 = y1.relu() + 1
        e2.record()
    e2.synchronize()
    print("RESULT streams_events", e1.query(), e2.query(), e0.elapsed_time(e2) >= 0, flush=True)
    keep("streams", y2)


@part("memory")
def _():
    keep_alive = []
    for mib in (1, 3, 17, 64, 130, 7):
        keep_alive.append(torch.full((mib << 18,), float(mib), device=dev))
    total = sum(float(a.sum().item()) for a in keep_alive)
    del keep_alive[2:4]
    b = torch.randn(50 << 18, device=dev)
    torch.cuda.synchronize()
    print("RESULT memory_total", total, flush=True)
    s = torch.cuda.memory_stats()
    for key in ("allocation.all.allocated", "segment.all.allocated", "reserved_bytes.all.peak",
                "allocated_bytes.all.peak", "num_alloc_retries", "num_ooms"):
        print("STATS", key, s.get(key), flush=True)
    del b, keep_alive
    torch.cuda.empty_cache()
    print("STATS reserved_after_empty_cache", torch.cuda.memory_stats().get("reserved_bytes.all.current"), flush=True)


torch.cuda.synchronize()
torch.save(saved, os.path.join(out_dir, "tensors.pt"))


def mapped():
    libs = set()
    for line in open("/proc/self/maps"):
        f = line.split()
        if len(f) >= 6 and ("/nvidia/" in f[5] or os.path.basename(f[5]).startswith(("libcu", "libnv"))):
            libs.add(f[5])
    return sorted(libs)


for p in mapped():
    print("MAPPED", p, flush=True)


def run_probes():
    """Each probe in a fresh process (probes.py): a refused CUDA-graph capture
    leaves torch's generators mid-capture, which would fail the next probe in
    the same process for a reason of its own."""
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("cuda_graph", "torch_compile", "nccl"):
        try:
            r = subprocess.run([sys.executable, os.path.join(here, "probes.py"), name], capture_output=True,
                               text=True, timeout=120)
            lines = [l for l in r.stdout.splitlines() if l.startswith("PROBE ")]
            print(lines[-1] if lines else f"PROBE {name} error no answer (rc {r.returncode}): "
                  + " ".join(r.stderr.split())[-300:], flush=True)
            # What the shims named on the probe's stderr (through them only).
            named = sorted({l.strip() for l in r.stderr.splitlines() if l.startswith("smolvm ")})
            if named:
                print(f"PROBE-NAMED {name}: " + "; ".join(named)[:600], flush=True)
        except subprocess.TimeoutExpired:
            print(f"PROBE {name} error HANG: no answer in 120 s", flush=True)


if os.environ.get("SUITE_PROBES") == "1":
    run_probes()
print(f"DONE errors={errors}", flush=True)
sys.exit(1 if errors else 0)
