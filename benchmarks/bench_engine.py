"""Engine speed and network-event reduction on the Megatron GPT A100 suite (issue 7).

`NUMBA_CACHE_DIR=.cache/numba .venv/bin/python benchmarks/bench_engine.py [--repeat N]` prints, per case:
seconds for operators, memory and the engine (graph + simulation, after JIT), pipeline-graph nodes, link
events simulated vs a flattened per-rank trace, and the reduction factor. Every timing is the median of N
runs, each started with cold result caches (a fresh `Caches` each: collective simulations are re-run), so a
case's number is what it costs alone, not inside a sweep that already simulated its collectives.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

from rapidllm.caches import Caches
from rapidllm.engine.engine import simulate
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import price_case
from rapidllm.spec.case import resolve_case
from rapidllm.spec.experiment import expand
from rapidllm.validate.suites import load_suite


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    suite = load_suite("validation/suites/megatron_gpt_a100.yaml")
    rows = [r for r in expand(suite.experiment) if r["status"] == "ok"]
    cases = [resolve_case(json.loads(r["case_json"]), r["label"]) for r in rows]
    c0 = cases[0]
    simulate(c0, price_case(c0), memory_for_case(c0))          # JIT warm-up
    print(f"{'case':40s} {'ops s':>6s} {'mem s':>6s} {'eng s':>6s} {'total':>6s} {'nodes':>7s} {'ev sim':>9s} "
          f"{'ev flat':>11s} {'x':>8s}")
    suite_total = 0.0
    for row, c in zip(rows, cases):
        runs = []
        for _ in range(args.repeat):
            with Caches().active():
                t0 = time.perf_counter()
                ops = price_case(c)
                t1 = time.perf_counter()
                mem = memory_for_case(c)
                t2 = time.perf_counter()
                rec = simulate(c, ops, mem)
                t3 = time.perf_counter()
            runs.append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
        o, m, e, t = (statistics.median(x) for x in zip(*runs))
        suite_total += t
        sim, flat = rec["network_events_simulated"], rec["network_events_flattened"]
        print(f"{row['label'][:40]:40s} {o:6.3f} {m:6.3f} {e:6.3f} {t:6.3f} {rec['graph_nodes']:7d} {sim:9.0f} "
              f"{flat:11.3g} {flat / max(sim, 1):8.0f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"suite: {len(cases)} cases, {suite_total:.2f} s end to end (sum of per-case medians, cold caches); "
          f"peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
