"""Best-layout search over DP/TP/PP/CP/EP, recompute, ZeRO, schedules and kernels (docs/search.md).

`rapidllm.search(spec)` returns the ranked layouts; the package sits above `rapidllm.prediction` (every
number comes from `predict`) and below the pipeline and the CLI. The package is also callable, because
importing it makes `rapidllm.search` name this package rather than the function: `rapidllm.search(spec)`
then still calls `search.run.search`, whichever was imported first.
"""
from __future__ import annotations

import sys
import types
from typing import Any

from rapidllm.search.run import merge, search
from rapidllm.search.spec import SearchSpec, load_search

__all__ = ["SearchSpec", "load_search", "merge", "search"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
