"""GEMM tile-model speed: shapes priced per second on one core after JIT, and first-call (compile) time
with an empty and with a warm numba cache. Run: NUMBA_NUM_THREADS=1 .venv/bin/python benchmarks/bench_gemm.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

FIRST_CALL = """
import time, json
t0 = time.perf_counter()
from rapidllm.ops.gemm import gemm_time
from rapidllm.validate.kernels import load_hardware
hw = load_hardware('h100-sxm5-80gb')
t1 = time.perf_counter()
gemm_time(hw, 4096, 4096, 4096, 'bf16')
t2 = time.perf_counter()
print(json.dumps({'import_s': t1 - t0, 'first_call_s': t2 - t1}))
"""


def first_call(cache_dir: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, NUMBA_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def throughput(n: int = 200_000, repeats: int = 3) -> dict:
    from rapidllm.ops.gemm import price_gemms
    from rapidllm.validate.kernels import load_hardware
    rng = np.random.default_rng(0)
    out = {}
    for dev in ("a100-sxm4-80gb", "h100-sxm5-80gb", "b200"):       # mma.sync, wgmma, tcgen05 catalogs
        hw = load_hardware(dev)
        b = rng.integers(1, 9, n)
        m, nn, k = (np.exp(rng.uniform(0, np.log(65536), n)).astype(np.int64) + 1 for _ in range(3))
        price_gemms(hw, b[:10], m[:10], nn[:10], k[:10], "bf16")          # JIT / cache load
        best = min(_timed(price_gemms, hw, b, m, nn, k, "bf16") for _ in range(repeats))
        out[dev] = {"shapes": n, "seconds": best, "shapes_per_s": n / best}
    return out


def _timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as cold:
        cold_run = first_call(cold)
        warm_run = first_call(cold)                                     # same dir, now populated
    result = {"throughput": throughput(), "cold_cache": cold_run, "warm_cache": warm_run}
    print(json.dumps(result, indent=2))
