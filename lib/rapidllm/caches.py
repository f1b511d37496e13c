"""Memo tables of pure functions, held in one object whose owner decides how long they live.

A sweep evaluates thousands of cases that share specs, operator shapes, topologies and collectives; these
tables let each be computed once. Every key is the value the result is a function of (a spec, a shape, a
layout, a file's modification time), so a hit is exactly what the function would return: sharing a table
can change how long a prediction takes, never its numbers. The exception, `IdentityMemo`, keys frozen
objects by identity and holds them, which is as exact (an object cannot change, and its id cannot be
reused while the entry lives) where hashing the value would cost what the function does.

Lifetime: the owner opens a scope, `with Caches().active(): ...`, and the code below reads the active
tables through `current()` instead of taking them as an argument through every layer. `prediction.sweep`
and `prediction.predict_many` open a fresh `Caches` per call unless given one; a call made outside any
scope (a notebook's `rapidllm.predict`, a pipeline job, which is a process of its own) uses
`PROCESS_DEFAULT`, which lives as long as the process (documented in rapidllm.prediction). Every table is bounded: it is
emptied when full, far above what one sweep needs.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import is_
from typing import Any


class Memo(dict):
    """A dict that empties itself before an insertion would take it past `limit` entries, or past `budget`
    bytes when its entries are weighed (`put(..., nbytes=)`: tables of large arrays)."""

    def __init__(self, limit: int, budget: int | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.budget = budget
        self.nbytes = 0

    def put(self, key: Any, value: Any, nbytes: int = 0) -> Any:
        over = self.budget is not None and self.nbytes + nbytes > self.budget
        if key not in self and (len(self) >= self.limit or over):
            self.clear()
            self.nbytes = 0
        self[key] = value
        self.nbytes += nbytes
        return value


class LruMemo(Memo):
    """A `Memo` that drops its least recently used entries, not all of them, to stay within `limit` entries
    and `budget` bytes: for a table of large entries that are costly to build and come back after others
    (the pipeline shapes of a sweep's layouts: emptying a full table rebuilt half of them)."""

    def __init__(self, limit: int, budget: int | None = None) -> None:
        super().__init__(limit, budget)
        self.sizes: dict[Any, int] = {}

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            return default
        value = self[key] = self.pop(key)           # the most recently used last
        return value

    def put(self, key: Any, value: Any, nbytes: int = 0) -> Any:
        if key in self:
            del self[key]
            self.nbytes -= self.sizes.pop(key)
        while self and (len(self) >= self.limit or (self.budget is not None and self.nbytes + nbytes > self.budget)):
            oldest = next(iter(self))
            del self[oldest]
            self.nbytes -= self.sizes.pop(oldest)
        self[key] = value
        self.sizes[key] = nbytes
        self.nbytes += nbytes
        return value


class IdentityMemo(dict):
    """`compute()` for a tuple of frozen objects, kept under their ids with the objects held by the entry
    (so a hit is those very objects: a sweep's cases share a few specs and priced tables, and hashing or
    comparing them by value would cost what the function does). Emptied at `limit` entries."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def of(self, objs: tuple, compute: Callable[[], Any]) -> Any:
        key = tuple(map(id, objs))
        hit = self.get(key)
        if hit is None or not all(map(is_, hit[0], objs)):
            if len(self) >= self.limit:
                self.clear()
            hit = self[key] = (objs, compute())
        return hit[1]


def _memo(limit: int, budget: int | None = None) -> Any:
    return field(default_factory=lambda: Memo(limit, budget))


def _identity_memo(limit: int) -> Any:
    return field(default_factory=lambda: IdentityMemo(limit))


@dataclass
class Caches:
    """The memo tables of one owner (a sweep, a validation run, a pipeline job, a test)."""
    inline_specs: Memo = _memo(4096)      # (kind, schema dir, repr(mapping)) -> True: passed validation
    valid_values: Memo = _memo(16384)     # (kind, schema dir, key, repr(value)) -> True: in a valid mapping
    named_specs: Memo = _memo(256)        # (spec class, name) -> (the named file's mapping, built spec)
    plain_specs: Memo = _memo(256)        # built named spec -> its JSON-able plain form (case ids)
    gemm_times: Memo = _memo(64)          # (kernel parameters, tile catalog key) -> {(b, m, n, k): s}
    priced_layers: Memo = _memo(512)      # layer pricing key -> priced rows of the layer sections
    priced_steps: Memo = _memo(4096)      # (device repr, precision, attention, method, step operators) -> rows
    sized_networks: Memo = _memo(1024)    # (unsized NetworkSpec, world) -> the fabric sized for that world
    topologies: Memo = _memo(64)          # NetworkSpec -> (Topology, Router)
    collectives: Memo = _memo(20000)      # (network, util, framework, op, bytes, groups) -> (s, events, n)
    # (network, util, op, algorithm, chunks, groups) -> network.plan.Plan: the simulation for any bytes;
    # plans hold arrays of up to a few MB (route tables, the listed barriers of a join not made of rings):
    # 256 MB in all
    collective_plans: Memo = _memo(4096, 256 << 20)
    groups: Memo = _memo(4096)            # (layout, axis, stage) -> parallel groups, contending groups, dims
    templates: Memo = _memo(1024)         # (operator rows, layer-rule inputs) -> the case's layer templates
    replays: Memo = _memo(4096)           # (template id, its durations, channels) -> (template, replay, uses)
    # (model, conventions, layout sizes, sharding, stages) -> per-stage state bytes; also stage parameters
    stage_states: Memo = _memo(4096)
    liveness: Memo = _memo(1024)          # (model, layer shard, attention, recompute, sp, fp8, conventions) -> liveness
    # pipeline DAG structure key -> its PipelineShape (up to ~10 MB each; a sweep visits the cases of one
    # layout together, and layouts of one pp and micro-batch count share shapes, graph/pipeline_dag.py)
    pipeline_shapes: LruMemo = field(default_factory=lambda: LruMemo(64, 128 << 20))
    spec_texts: IdentityMemo = _identity_memo(256)         # (model / hardware / network spec,) -> its case_id JSON
    hardware_reprs: IdentityMemo = _identity_memo(64)      # (HardwareSpec,) -> repr (the layer pricing key)
    param_counts: IdentityMemo = _identity_memo(256)       # (ModelSpec,) -> ops.params.ParamCounts
    # (template, a priced table's shared leading rows) -> the template's compute durations from those rows
    shared_durations: IdentityMemo = _identity_memo(4096)
    shared_views: IdentityMemo = _identity_memo(512)       # (a priced table's shared leading rows,) -> their OpsView

    @contextlib.contextmanager
    def active(self) -> Iterator[Caches]:
        """Make these the tables `current()` returns until the block ends (nested scopes restore)."""
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


PROCESS_DEFAULT = Caches()
_ACTIVE: ContextVar[Caches | None] = ContextVar("rapidllm_caches", default=None)


def current() -> Caches:
    """The innermost active scope's tables, else the process default."""
    return _ACTIVE.get() or PROCESS_DEFAULT
