"""rapidllm: a fast, validated performance model for distributed LLM training and inference.

The public Python API (docs/api.md). Everything here goes through `rapidllm.prediction`, the one place a case
becomes a prediction, so a number from a notebook equals the CLI's and the pipeline's for the same case:

    import rapidllm
    case = rapidllm.load_case("case.yaml")     # or a mapping with the keys of a case file
    p = rapidllm.predict(case)                 # typed Prediction: step time, breakdown, memory by component
    df = rapidllm.predict_many([case, ...])    # one row per case (pandas DataFrame)
    df = rapidllm.sweep("config/experiments/llama70b-layouts.yaml")
    df = rapidllm.search("examples/search-llama70b.yaml")   # best layouts, ranked (docs/search.md)

Names are imported on first use (PEP 562), so `rapidllm.cli` starts without loading pandas or numba.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    "predict": "rapidllm.prediction", "predict_many": "rapidllm.prediction", "sweep": "rapidllm.prediction",
    "export_chakra": "rapidllm.prediction",
    "Prediction": "rapidllm.prediction", "MemoryBreakdown": "rapidllm.prediction",
    "Case": "rapidllm.spec.case", "load_case": "rapidllm.spec.case", "resolve_case": "rapidllm.spec.case",
    "SpecError": "rapidllm.spec.errors",
    "search": "rapidllm.search",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rapidllm' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
