"""Best-layout search over DP/TP/PP/CP/EP, recompute, ZeRO, schedules and kernels (docs/search.md).

`rapidllm.search(spec)` returns the ranked layouts; the package sits above `rapidllm.prediction` (every
number comes from `predict`) and below the pipeline and the CLI. Names load on first use (PEP 562), so the
Snakemake rules can read a spec's files without loading the engine. The package is also callable: importing
it makes `rapidllm.search` name this package rather than the function, and `rapidllm.search(spec)` must
still call `search.run.search`, whichever was imported first.
"""
from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import Any

_HOMES = {"search": "rapidllm.search.run", "merge": "rapidllm.search.run",
          "SearchSpec": "rapidllm.search.spec", "load_search": "rapidllm.search.spec"}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'rapidllm.search' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return __getattr__("search")(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
