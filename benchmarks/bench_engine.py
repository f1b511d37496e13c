"""Engine speed and network-event reduction on the Megatron GPT A100 suite (issue 7).

`NUMBA_CACHE_DIR=.cache/numba .venv/bin/python benchmarks/bench_engine.py` prints, per case: seconds
for operators, memory and the engine (graph + simulation, after JIT), pipeline-graph nodes, link events
simulated vs a flattened per-rank trace, and the reduction factor.
"""
from __future__ import annotations

import json
import time

from rapidllm.engine.engine import predict
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import price_case
from rapidllm.spec.case import resolve_case
from rapidllm.spec.experiment import expand
from rapidllm.validate.suites import load_suite


def main() -> None:
    suite = load_suite("validation/suites/megatron_gpt_a100.yaml")
    cases = [resolve_case(json.loads(r["case_json"]), r["label"]) for r in expand(suite.experiment) if r["status"] == "ok"]
    c0 = cases[0]
    predict(c0, price_case(c0), memory_for_case(c0))          # JIT warm-up
    print(f"{'case':34s} {'ops s':>6s} {'mem s':>6s} {'eng s':>6s} {'nodes':>7s} {'ev sim':>9s} {'ev flat':>11s} {'x':>8s}")
    for c in cases:
        t0 = time.perf_counter()
        ops = price_case(c)
        t1 = time.perf_counter()
        mem = memory_for_case(c)
        t2 = time.perf_counter()
        rec = predict(c, ops, mem)
        t3 = time.perf_counter()
        sim, flat = rec["network_events_simulated"], rec["network_events_flattened"]
        print(f"{c.name:34s} {t1 - t0:6.3f} {t2 - t1:6.3f} {t3 - t2:6.3f} {rec['graph_nodes']:7d} {sim:9.0f} {flat:11.3g} {flat / max(sim, 1):8.0f}")


if __name__ == "__main__":
    main()
