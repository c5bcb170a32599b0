#!/usr/bin/env python3
"""A stand-in for bench/peers/peft_dpo.py where there is no torch: what
scripts/device-gvisor-dpo.sh needs to rehearse on the fake backend (its
machines, volumes, summary and record). Same flags (--config, --batch,
--maxseq, --steps, --out) and the same --out JSON keys; each "step" copies a
batch's bytes to the device and back through libcudart.so.13 when one loads
(the smolvm shims, preloaded in a --cuda machine), else sleeps; the "losses"
are a function of the step only, so every arm's agree. Not a benchmark.
"""
import argparse, ctypes, json, sys, time


def cuda():
    try:
        rt = ctypes.CDLL("libcudart.so.13")
    except OSError:
        return None
    n = ctypes.c_int(0)
    return rt if rt.cudaGetDeviceCount(ctypes.byref(n)) == 0 and n.value > 0 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="qwen2.5-0.5b")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--maxseq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out")
    a = ap.parse_args()
    t0 = time.monotonic()
    rt = cuda()
    n = a.batch * a.maxseq * 4096
    buf = ctypes.create_string_buffer(n)
    dev = ctypes.c_void_p()
    if rt is not None and rt.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(n)) != 0:
        print("standin: cudaMalloc failed", file=sys.stderr)
        return 1
    load_s = time.monotonic() - t0
    losses, step_ms = [], []
    for step in range(a.steps):
        ts = time.monotonic()
        if rt is not None:
            if rt.cudaMemcpy(dev, buf, ctypes.c_size_t(n), 1) or rt.cudaMemcpy(buf, dev, ctypes.c_size_t(n), 2):
                print("standin: cudaMemcpy failed", file=sys.stderr)
                return 1
        else:
            time.sleep(0.005)
        losses.append(0.6931 / (1 + step))
        step_ms.append((time.monotonic() - ts) * 1e3)
    train_s = sum(step_ms) / 1e3
    warm = step_ms[3:]
    res = {"tok_s": a.steps * a.batch * a.maxseq / train_s, "train_s": train_s, "step_ms": train_s * 1e3 / a.steps,
           "losses_hex": [x.hex() for x in losses], "peak_gb": 0.0,
           "tok_s_warm": len(warm) * a.batch * a.maxseq / (sum(warm) / 1e3), "step_ms_warm": sum(warm) / len(warm),
           "impl": "standin" + ("+cuda" if rt is not None else ""), "model": a.config, "batch": a.batch,
           "maxseq": a.maxseq, "steps": a.steps, "load_s": load_s, "shim_round_trips": None}
    print(json.dumps(res))
    if a.out:
        with open(a.out, "w") as f:
            f.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
