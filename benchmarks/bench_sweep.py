"""End-to-end sweep speed: cases per second and seconds per case through price + memory + trace + simulate.

Run: NUMBA_CACHE_DIR=.cache/numba .venv/bin/python benchmarks/bench_sweep.py [EXPERIMENT.yaml]
Prints expand time, per-case time (median over feasible cases), cases/s and peak RSS. Results go to
docs/performance.md by hand, with the date and machine.
"""
from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from pathlib import Path

from rapidllm.prediction import evaluate
from rapidllm.spec.case import resolve_case
from rapidllm.spec.experiment import expand, load_experiment

ROOT = Path(__file__).resolve().parents[1]


def main(path: str) -> None:
    exp = load_experiment(path)
    t0 = time.perf_counter()
    rows = expand(exp)
    t_expand = time.perf_counter() - t0
    cases = [resolve_case(json.loads(r["case_json"]), r["label"]) for r in rows if r["status"] == "ok"]
    evaluate(cases[0])                      # JIT warm-up (numba cache) outside the timing
    times = []
    t0 = time.perf_counter()
    for case in cases:
        t = time.perf_counter()
        evaluate(case)
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"experiment {exp.name}: {len(rows)} combinations, {len(cases)} valid; expand {t_expand:.2f} s")
    print(f"evaluate: {total:.2f} s, {len(cases) / total:.1f} cases/s, median {1e3 * statistics.median(times):.1f} ms/case, "
          f"max {1e3 * max(times):.1f} ms; peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "config" / "experiments" / "llama70b-layouts.yaml"))
