"""Cases per second of the memory stage alone (liveness model and closed form), on a small sweep."""
from __future__ import annotations

import itertools
import time

from rapidllm.memory.closed_form import closed_form_memory
from rapidllm.memory.model import memory_for_case
from rapidllm.spec.case import Case, resolve_case


def sweep_cases() -> list[Case]:
    """96 training cases of Llama-2-7B/70B over TP/PP/ZeRO/recompute/micro-batch."""
    out = []
    for model, tp, pp, zero, rc, mb in itertools.product(("llama2-7b", "llama2-70b"), (1, 8), (1, 4), (0, 1, 3),
                                                         ("none", "full"), (1, 2)):
        out.append(resolve_case({"model": model, "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
                                 "workload": {"mode": "training", "seq_len": 4096, "global_batch": 4 * mb * 16,
                                              "micro_batch": mb},
                                 "parallelism": {"dp": 4, "tp": tp, "pp": pp, "zero": zero, "recompute": rc,
                                                 "sp": tp > 1}}, "bench"))
    return out


def cases_per_second(fn, cases: list[Case], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for c in cases:
            fn(c)
        best = min(best, time.perf_counter() - t0)
    return len(cases) / best


if __name__ == "__main__":
    cases = sweep_cases()
    print(f"memory_for_case:    {cases_per_second(memory_for_case, cases):8.0f} cases/s ({len(cases)} cases)")
    print(f"closed_form_memory: {cases_per_second(closed_form_memory, cases):8.0f} cases/s")
