"""What a search ranks by: a record column and a direction, plus how to compute it from a prediction record.

An objective is pluggable (cost, issue 18: a $-per-token column): `Objective(name, direction, derive)`.
`derive(record, case)` turns an `evaluate` record into the objective's value. Pruning applies `derive` to an
optimistic record (every time replaced by its lower bound), so it is safe only when the objective gets no
better as any time grows: set `monotone=False` for an objective that is not, and the search evaluates every
layout that fits in memory (bounds then prune nothing).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from rapidllm.prediction import replicas_served
from rapidllm.spec.case import Case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.layout import TrainingWorkload

Derive = Callable[[Mapping[str, Any], Case], float]

# (column, direction) pairs a bound exists for (search/bounds.py), by mode: times to minimize, rates to maximize
BOUNDED = {"training": {("step_time_s", "min"), ("tokens_per_s", "max"), ("mfu", "max")},
           "inference": {("ttft_s", "min"), ("itl_s", "min"), ("e2e_latency_s", "min"), ("tokens_per_s", "max")}}


@dataclass(frozen=True)
class Objective:
    name: str                   # the column the ranked table carries
    direction: str              # "min" or "max"
    derive: Derive
    monotone: bool = True       # no better when any time grows: bounds may prune
    # derive reads of the case only what every layout of a (candidate, GPU count) group shares (world, model,
    # hardware, global batch, sequence length): a search may then derive a bound with another layout's case
    # of the group, and builds no case for a layout its bound prunes
    group_level: bool = False

    def key(self, value: float) -> float:
        """Sort key, smaller is better; NaN (no value) sorts last."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return math.inf
        return value if self.direction == "min" else -value


def column(name: str) -> Derive:
    return lambda rec, case: float(rec[name])


def per_gpu(name: str) -> Derive:
    """A rate per GPU of the case: an inference record's rate is one dp replica's (`replicas_served`), so
    there it reads the layout's dp, which the layouts of a group do not share (not `group_level`)."""
    return lambda rec, case: float(rec[name]) * replicas_served(case) / case.parallelism.world


def time_to_train(tokens: float) -> Derive:
    def derive(rec: Mapping[str, Any], case: Case) -> float:
        w = case.workload
        assert isinstance(w, TrainingWorkload)
        return math.ceil(tokens / (w.global_batch * w.seq_len)) * float(rec["step_time_s"])
    return derive


def record_columns() -> set[str]:
    """The numeric columns of a prediction record (`Prediction.to_dict`) an objective may rank by: its float
    and int fields (not `schedule`, `in_flight_limit` or `device_validated`, which a rank cannot order by)."""
    from rapidllm.prediction import MemoryBreakdown, Prediction   # heavy (pandas, numba): only when asked

    numeric = {f.name for f in fields(Prediction) if str(f.type).split(" |")[0] in ("float", "int")}
    return numeric | {f"{f.name}_bytes" for f in fields(MemoryBreakdown) if f.name != "peak"} | {"peak_memory_bytes"}


# cost columns (docs/cost.md, `cost.price.cost_record`) a spec's objective may name, with the direction in
# which each gets no better as a time grows (so bounds prune): $ per step or per million tokens rise with
# the step time, token rates per $, per watt and per capital $ fall. $/GPU-hour and the package cost do
# not depend on the layout and rank nothing.
COST_OBJECTIVES = {"usd_per_step": "min", "usd_per_million_tokens": "min", "tokens_per_usd": "max",
                   "tokens_per_s_per_watt": "max", "tokens_per_s_per_capital_usd": "max"}


def cost_objective(name: str, direction: str, costs: Mapping[str, Any], training: bool) -> Objective:
    """Rank by the cost column `name` (COST_OBJECTIVES), each device priced with `costs[hardware name]` (a
    `cost.HardwareCost`, read once per search). A training record's price reads the world size and the
    device, which a group shares (`group_level`); an inference record's rate is one dp replica's, so its
    price reads the layout's dp (`replicas_served`) and is not group-level."""
    from rapidllm.cost.price import price_prediction

    def derive(rec: Mapping[str, Any], case: Case) -> float:
        return float(price_prediction(case, rec, costs[case.hardware.name])[name])
    return Objective(name, direction, derive, monotone=COST_OBJECTIVES[name] == direction, group_level=training)


# the named objectives of each workload mode (workflow/schemas/search.schema.yaml lists their union)
NAMED = {"training": ("mfu", "step_time_s", "time_to_train_s", "tokens_per_s_per_gpu"),
         "inference": ("throughput_per_gpu", "e2e_latency_s", "ttft_s", "itl_s")}


def objective_from_spec(value: Any, mode: str, train_tokens: float | None, source: str,
                        costs: Callable[[], Mapping[str, Any]] | None = None) -> Objective:
    """The spec's `objective` (default: step time for training, throughput per GPU for inference). `costs`
    returns the cost inputs of the spec's devices by name, asked only for a cost column."""
    if value is None:
        value = "step_time_s" if mode == "training" else "throughput_per_gpu"
    if isinstance(value, str):
        if value not in NAMED[mode]:
            article = "an" if mode == "inference" else "a"
            raise SpecError.at(source, "objective", f"{value!r} does not apply to {article} {mode} workload; "
                               f"allowed: {', '.join(NAMED[mode])}, or {{column: NAME, direction: min|max}}")
        if value == "time_to_train_s":
            if not train_tokens:
                raise SpecError.at(source, "train_tokens", "objective time_to_train_s needs train_tokens")
            return Objective(value, "min", time_to_train(float(train_tokens)), group_level=True)
        if value in ("tokens_per_s_per_gpu", "throughput_per_gpu"):     # inference: reads the layout's dp
            return Objective(value, "max", per_gpu("tokens_per_s"), group_level=mode == "training")
        return Objective(value, "max" if value == "mfu" else "min", column(value), group_level=True)
    name = value["column"]
    if name in COST_OBJECTIVES:          # priced per device once the candidates are known (search/spec.py)
        if name == "usd_per_step" and mode != "training":
            raise SpecError.at(source, "objective.column", "usd_per_step is a training step's price; allowed for "
                               "inference: usd_per_million_tokens, tokens_per_usd, tokens_per_s_per_watt, "
                               "tokens_per_s_per_capital_usd")
        if costs is None:
            raise SpecError.at(source, "objective.column", f"{name} needs the devices' cost inputs")
        return cost_objective(name, value["direction"], costs(), mode == "training")
    if name not in record_columns():
        raise SpecError.at(source, "objective.column", f"unknown column {name!r}; allowed: "
                           f"{', '.join(sorted(record_columns()))}, or a cost column: {', '.join(COST_OBJECTIVES)} "
                           "(docs/cost.md)")
    return Objective(name, value["direction"], column(name), monotone=(name, value["direction"]) in BOUNDED[mode],
                     group_level=True)
