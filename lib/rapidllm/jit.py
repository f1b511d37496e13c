"""Numba kernels that cost nothing until they run, and that may run as plain Python when their work is small.

Why: importing numba takes ~0.3 s and loading the first kernel from numba's on-disk cache another ~0.3 s
(numba builds its typing and target contexts then), more than the whole of a small prediction such as
GPT-175B on 64 GPUs (~2,000 pipeline nodes, ~450 link events). So a kernel written as
`@njit(cache=True)` with this module's `njit` is a `Kernel`: numba is imported and the kernel compiled (or
loaded from the cache) on its first compiled call, never at import time. Inside `interpret_budget(n)`
(what `rapidllm predict` runs under), kernel calls run the kernel's own Python function on the same arrays
instead, as long as their estimated work (loop iterations) adds up to at most n; a call that would pass
the budget runs compiled. A kernel called from an interpreted kernel is interpreted with it.

Numba compiles Python semantics: the same integer and IEEE double operations in the same order, so both
ways give the same numbers (tests/test_jit.py compares every kernel of the predict path, and whole
predictions, bit for bit). Kernels keep numba's restrictions (no Python objects), so they compile too.
"""
from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

_budget = 0                   # estimated work (loop iterations) still allowed to run as Python
_interpreting = False         # inside an interpreted kernel: the kernels it calls run as Python too


def array_work(*args: Any) -> int:
    """Default work estimate: the elements of the array arguments (kernels whose loops scale with them)."""
    return sum(a.size for a in args if isinstance(a, np.ndarray))


class Kernel:
    """A numba kernel compiled on first compiled use; callable like the numba dispatcher it wraps."""

    def __init__(self, fn: Callable, options: dict[str, Any], work: Callable[..., int] | None) -> None:
        self.py_func = fn
        self.options = options
        self.work = work or array_work
        self._dispatcher: Any = None
        functools.update_wrapper(self, fn)

    def compiled(self) -> Any:
        """The numba dispatcher. The kernels this one calls are given to numba as their dispatchers (numba
        resolves globals at compile time), through a copy of the function bound to swapped globals."""
        if self._dispatcher is None:
            import numba

            fn = self.py_func
            names = set(fn.__code__.co_names)
            swapped = {k: v.compiled() for k, v in fn.__globals__.items() if k in names and isinstance(v, Kernel)}
            if swapped:
                fn = types.FunctionType(fn.__code__, {**fn.__globals__, **swapped}, fn.__name__,
                                        fn.__defaults__, fn.__closure__)
                fn.__qualname__, fn.__module__ = self.py_func.__qualname__, self.py_func.__module__
            self._dispatcher = numba.njit(**self.options)(fn)
        return self._dispatcher

    def __call__(self, *args: Any) -> Any:
        global _budget, _interpreting
        if _interpreting:
            return self.py_func(*args)
        if _budget > 0:
            work = self.work(*args)
            if work <= _budget:
                _budget -= work
                _interpreting = True
                try:
                    return _boxed(self.py_func(*args))
                finally:
                    _interpreting = False
        return self.compiled()(*args)


def _boxed(value: Any) -> Any:
    """What numba returns to Python for a kernel's result: numpy scalars as Python numbers (np.float64 ->
    float), tuples element by element, arrays as they are."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return tuple(_boxed(v) for v in value)
    return value


def njit(*, work: Callable[..., int] | None = None, **options: Any) -> Callable[[Callable], Kernel]:
    """`numba.njit(**options)`, compiled lazily: `@njit(cache=True)` or `@njit(cache=True, work=estimate)`,
    where `estimate(*args)` is the kernel's work in loop iterations (default: elements of its arrays)."""
    return lambda fn: Kernel(fn, options, work)


@contextlib.contextmanager
def interpret_budget(work: int) -> Iterator[None]:
    """Run kernel calls as Python until their estimated work adds up to `work` iterations
    (interpreted, one iteration costs ~1-5 us: 50,000 is ~0.1-0.25 s, a third of numba's start-up)."""
    global _budget
    old, _budget = _budget, work
    try:
        yield
    finally:
        _budget = old
