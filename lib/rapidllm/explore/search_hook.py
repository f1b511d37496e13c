"""The explorer's hook into the layout search (`rapidllm.search`, docs/search.md): find it, build a small
search spec around the case on the page, run it, rank.

The page never imports the search itself: `search_function()` returns the search entry point, or None
with the reason (the package is missing or has no `search`), and the page says so instead of failing. The
contract assumed of the entry point is the one of `rapidllm.search`: `search(spec_mapping, top=k)` returning
a table ranked best first (a `rank` column, the layout columns and the prediction columns).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pandas as pd

from rapidllm.spec.case import SEARCH_CASE_KEYS

SearchFn = Callable[..., pd.DataFrame]
# where the entry point may live: the public package, or its runner module
ENTRY_POINTS = (("rapidllm.search", "search"), ("rapidllm.search.run", "search"))
OBJECTIVES = {"training": ("step_time_s", "mfu", "tokens_per_s_per_gpu"),
              "inference": ("e2e_latency_s", "ttft_s", "itl_s")}


def search_function() -> tuple[SearchFn | None, str]:
    """(the search entry point, "") when importable, else (None, why not)."""
    reasons = []
    for module, name in ENTRY_POINTS:
        try:
            fn = getattr(importlib.import_module(module), name, None)
        except ImportError as err:
            reasons.append(f"{module}: {err}")
            continue
        if callable(fn):
            return fn, ""
        reasons.append(f"{module} has no {name}()")
    return None, "the layout search is not available in this installation (" + "; ".join(reasons) + ")"


def search_spec(case: dict[str, Any], gpus: int, objective: str, space: dict[str, list] | None = None) -> dict:
    """A search spec around a case: its model, hardware, network, precision (FP8 recipe, decode kernel, KV-cache
    precision), framework and workload, on `gpus` GPUs, over `space` (axis -> values; axes left out take every sensible
    value), ranked by `objective`."""
    spec = {k: case[k] for k in ("model", "hardware", "network", "workload", "precision", *SEARCH_CASE_KEYS,
                                 "framework") if k in case}
    # the case's micro-batch would be the search's only one (search/spec.py); case_axes passes it when kept
    if isinstance(spec.get("workload"), dict):
        spec["workload"] = {k: v for k, v in spec["workload"].items() if k != "micro_batch"}
    spec.update(name="explorer", gpus=int(gpus), objective=objective)
    if space:
        spec["space"] = {k: list(v) for k, v in space.items() if v}
    return spec


def case_axes(case: dict[str, Any]) -> dict[str, list]:
    """The case's own schedule, SP, attention kernel and, for training, recompute, ZeRO, micro-batch and
    overlap switches as one-value search axes, so that a search from the page varies only the axes the user opens (a few layouts, answered in
    seconds, instead of the thousands of the full space); a switch the case sets stays on wherever it applies
    in the layouts searched (docs/search.md, "Overlap switches"). An inference search has no recompute, ZeRO,
    micro-batch or overlap axis (search/spec.py refuses them), so an inference case keeps only the first three."""
    from rapidllm.spec.case import OVERLAP_SWITCHES, resolve_case

    resolved = resolve_case(case, "case")
    p = resolved.parallelism
    axes: dict[str, list] = {"schedule": [p.schedule], "sp": [p.sp], "attention_impl": [resolved.attention_impl]}
    if resolved.training:
        axes.update(recompute=[p.recompute], zero=[p.zero], micro_batch=[resolved.workload.micro_batch],
                    **{s: [getattr(p, s)] for s in OVERLAP_SWITCHES})
    return axes


def run_search(spec: dict, top: int = 10, fn: SearchFn | None = None) -> pd.DataFrame:
    """The ranked table of a search spec (`fn` defaults to the installed search); ValueError when none."""
    if fn is None:
        fn, why = search_function()
        if fn is None:
            raise ValueError(why)
    return fn(spec, top=top)
