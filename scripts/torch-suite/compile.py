"""torch.compile and Triton, the same file natively and through the shims
(scripts/device-torch-compile.sh runs it both ways and compares the lines):
  RESULT name sha256 shape    the output's bytes, which must agree bit for bit
  ERROR name: message         a part that failed (the exit code is then 1)
Parts: a pointwise function and a matmul+relu under torch.compile (Inductor's
generated Triton kernels, launched by its static launcher), and a raw
@triton.jit kernel (Triton's own launcher). Inputs from a fixed seed."""
import hashlib
import sys
import time

import torch

dev = "cuda"
errors = 0


def digest(t):
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:32]


def part(name, fn):
    global errors
    t = time.perf_counter()
    try:
        out = fn()
        torch.cuda.synchronize()
        print(f"RESULT {name} {digest(out)} {tuple(out.shape)}", flush=True)
        print(f"TIME {name}_s={time.perf_counter() - t:.1f}", flush=True)
    except Exception as e:
        errors += 1
        print(f"ERROR {name}: {type(e).__name__}: {' '.join(str(e).split())[:400]}", flush=True)


def pointwise():
    f = torch.compile(lambda a: torch.sin(a) * 2 + 1)
    a = torch.randn(1 << 20, device=dev, generator=torch.Generator(dev).manual_seed(1))
    y = f(a)
    assert torch.allclose(y, torch.sin(a) * 2 + 1, atol=1e-6)
    return y


def matmul_relu():
    g = torch.compile(lambda x, w, b: torch.relu(x @ w + b))
    gen = torch.Generator(dev).manual_seed(2)
    x = torch.randn(512, 256, device=dev, generator=gen)
    w = torch.randn(256, 384, device=dev, generator=gen)
    b = torch.randn(384, device=dev, generator=gen)
    y = g(x, w, b)
    assert torch.allclose(y, torch.relu(x @ w + b), atol=1e-3, rtol=1e-3)
    return y


def raw_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out_ptr + i, a * tl.load(x_ptr + i, mask=m) + tl.load(y_ptr + i, mask=m), mask=m)

    gen = torch.Generator(dev).manual_seed(3)
    n = 100_003
    x = torch.randn(n, device=dev, generator=gen)
    y = torch.randn(n, device=dev, generator=gen)
    out = torch.empty_like(x)
    axpy[(triton.cdiv(n, 1024),)](x, y, out, 1.5, n, BLOCK=1024)
    # A CPU tensor: refused the same way both ways (Triton asks
    # cuPointerGetAttribute and takes CUDA_ERROR_INVALID_VALUE as "cpu tensor?").
    try:
        axpy[(1,)](x.cpu(), y, out, 1.5, 16, BLOCK=1024)
        torch.cuda.synchronize()
        kind = "accepted"
    except Exception as e:
        kind = type(e).__name__
    print(f"RESULT raw_triton_cpu_tensor {kind}", flush=True)
    return out


print(f"RESULT versions {torch.__version__} {torch.version.cuda}", flush=True)
part("pointwise", pointwise)
part("matmul_relu", matmul_relu)
part("raw_triton", raw_triton)
sys.exit(1 if errors else 0)
