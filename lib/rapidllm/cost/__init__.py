"""Chiplet manufacturing cost and operating cost ($/GPU-hour), and the cost of a prediction (docs/cost.md).

Sits beside search above `prediction`: it may import spec, ops and prediction; nothing below imports it.
Names load on first use (PEP 562), so the closed forms (`rapidllm.cost.silicon`) import without the engine.

    from rapidllm import cost, predict
    p = predict("examples/gpt175b-tp8-pp8.yaml")
    cost.price_prediction(case, p)       # $/step, $/M tokens, tokens/$ and per watt
    cost.add_cost_columns(sweep_df)      # the same as columns, to rank a sweep or a search by
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    "HardwareCost": "config", "cost_from_mapping": "config", "hardware_cost": "config", "load_process": "config",
    "Operating": "operating",
    "CostBreakdown": "package", "PackageSpec": "package", "package_cost": "package", "split_die": "package",
    "COST_COLUMNS": "price", "add_cost_columns": "price", "cost_record": "price", "price_prediction": "price",
    "Process": "silicon", "die_cost": "silicon", "die_yield": "silicon", "dies_per_wafer": "silicon",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rapidllm.cost' has no attribute {name!r}")
    value = getattr(import_module(f"rapidllm.cost.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
