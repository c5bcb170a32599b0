#!/usr/bin/env bash
# Issue 3 on the H200: cuBLAS / cuBLASLt / NVML natively and through the
# shims (daemon --backend cuda), from the repo root with build/ carried.
#   1. bench_blas sweep natively and through the shim: one hash per (api,
#      dtype, shape); the two lists must be identical (bit-identical GEMMs).
#   2. bench_blas perf both ways: 8192^3 bf16 TFLOP/s and 1,000 small GEMMs.
#   3. prog_gemm / prog_lt both ways (host-reference checks), prog_nvml
#      through the shim (the session's memory).
# Writes to $OUT (8 files at most): sweep_native.txt sweep_shim.txt perf.txt
# progs.txt nvml.txt daemon.log summary.txt, and records/blas_*.json (one
# record for bench/records). About 2-3 minutes. Exits 1 when the sweeps
# differ or a program fails (the record says which: sweep_identical,
# progs_pass, nvml_pass).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
find_build
OUT=${OUT:-$PWD/device-blas-out}
mkdir -p "$OUT"
BIN=$BUILD/tests/blas/bin
SHIM=$BUILD/shim

# The programs link NVIDIA's libcudart / libcublas by soname; find them when
# the loader cannot (toolkit elsewhere, or only pip's nvidia wheels). The
# daemon's workers inherit this path to find the real libcublas (skipping
# the shim directory by its .smolvm-shim marker).
nvidia_lib_path "$BIN/bench_blas"
summary "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
summary "native libs: $(ldd "$BIN/bench_blas" | grep -E 'cublas|cudart' | tr -s ' \t' ' ' | tr '\n' ';')"

make_workdir device-blas
sock=$W/cuda.sock
on_exit daemon_stop
daemon_start "$sock" "$OUT/daemon.log" --backend "${BACKEND:-cuda}" --pool 1
echo "daemon pid $DAEMON_PID" >> "$OUT/summary.txt"
# shim SECONDS PROGRAM ARGS...: runs PROGRAM through the shims, with a time limit.
shim() { local t=$1; shift; SMOLVM_CUDA_SOCKET=$sock LD_LIBRARY_PATH=$SHIM:${LD_LIBRARY_PATH:-} timeout "$t" "$@"; }

# 1. bit-identical sweep
timeout 150 "$BIN/bench_blas" sweep > "$OUT/sweep_native.txt" 2>&1; rn=$?
shim 150 "$BIN/bench_blas" sweep > "$OUT/sweep_shim.txt" 2>&1; rs=$?
nn=$(grep -c '^hash ' "$OUT/sweep_native.txt"); ns=$(grep -c '^hash ' "$OUT/sweep_shim.txt")
if [[ $rn == 0 && $rs == 0 ]] && diff <(grep '^hash ' "$OUT/sweep_native.txt") <(grep '^hash ' "$OUT/sweep_shim.txt") > /dev/null; then
  summary "sweep: IDENTICAL ($nn results; native rc $rn, shim rc $rs)"
else
  summary "sweep: DIFFERENT (native rc $rn $nn results, shim rc $rs $ns results)"
  diff <(grep '^hash ' "$OUT/sweep_native.txt") <(grep '^hash ' "$OUT/sweep_shim.txt") | head -20 >> "$OUT/summary.txt"
fi

# 2. performance
{ echo "== native"; timeout 60 "$BIN/bench_blas" perf 2>&1; echo "rc $?"
  echo "== shim"; shim 60 "$BIN/bench_blas" perf 2>&1; echo "rc $?"; } > "$OUT/perf.txt"
summary "perf: $(grep -E '^(==|perf)' "$OUT/perf.txt" | tr '\n' ' ')"

# 3. reference-checked programs, and NVML in the session
{ for p in prog_gemm prog_lt; do
    echo "== native $p"; timeout 60 "$BIN/$p" 2>&1 | tail -4; echo "rc ${PIPESTATUS[0]}"
    echo "== shim $p"; shim 60 "$BIN/$p" 2>&1 | tail -4; echo "rc ${PIPESTATUS[0]}"
  done; } > "$OUT/progs.txt"
summary "progs: $(grep -E '^(== |PASS|FAIL|rc )' "$OUT/progs.txt" | tr '\n' ' ')"
shim 60 "$BIN/prog_nvml" > "$OUT/nvml.txt" 2>&1; rnv=$?
summary "nvml: rc $rnv $(grep -E '^(memory|process|PASS|FAIL)' "$OUT/nvml.txt" | tr '\n' ' ')"

# One record of this run for bench/records (docs/bench.md, "Records"): the
# GEMM rates both ways and whether the sweep's hashes matched; samples: the
# perf lines and both sweeps' hash lines (one JSON document).
summary=$(python3 - "$OUT" "$rnv" <<'PY'
import json, os, re, sys
out, s, mode = sys.argv[1], {}, None
nvml_rc = int(sys.argv[2])
for line in open(os.path.join(out, "perf.txt"), errors="replace"):
    if line.startswith("== "):
        mode = line[3:].strip()
    m = re.match(r"perf bf16_8192\^3 ([0-9.]+) TFLOP/s", line)
    if m and mode:
        s[f"gemm_bf16_8192_tflops_{mode}"] = float(m.group(1))
    m = re.match(r"perf small_gemm_64\^3_x1000 [0-9.]+ us total, ([0-9.]+) us per GEMM", line)
    if m and mode:
        s[f"small_gemm_us_{mode}"] = float(m.group(1))
hashes = lambda f: [l for l in open(os.path.join(out, f), errors="replace") if l.startswith("hash ")]
n, h = hashes("sweep_native.txt"), hashes("sweep_shim.txt")
s["sweep_results"] = len(n)
s["sweep_identical"] = bool(n) and n == h
# Each program's "rc N" line and its PASS line, both ways (4 runs).
progs = open(os.path.join(out, "progs.txt"), errors="replace").read()
s["progs_pass"] = re.findall(r"^rc (\d+)$", progs, re.M) == ["0"] * 4 and len(re.findall(r"^PASS ", progs, re.M)) == 4
s["nvml_pass"] = nvml_rc == 0 and "PASS nvml" in open(os.path.join(out, "nvml.txt"), errors="replace").read()
perf = [l.rstrip("\n") for l in open(os.path.join(out, "perf.txt"), errors="replace") if l.startswith(("==", "perf"))]
json.dump({"perf": perf, "sweep_native": [l.rstrip("\n") for l in n], "sweep_shim": [l.rstrip("\n") for l in h]},
          open(os.path.join(out, "blas-samples.json"), "w"))
print(json.dumps(s))
PY
)
python3 scripts/device-record.py blas --out "$OUT" --command "scripts/device-blas.sh" --summary "${summary:-{\}}" \
  "$OUT/blas-samples.json" >>"$OUT/summary.txt" 2>&1 || summary "device-record.py failed"
rm -f "$OUT/blas-samples.json"
grep -qE '"(sweep_identical|progs_pass|nvml_pass)": false' <<<"$summary" && { summary "FAIL: $summary"; exit 1; }
exit 0
