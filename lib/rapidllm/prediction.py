"""The one place a case becomes a prediction: training or inference, event engine or alpha-beta baseline.

The CLI, the pipeline, validation, calibration, search and the explorer all call `evaluate` (a flat record
with the stable snake_case keys of the README) or the typed `predict` built on it, so a number printed by
`rapidllm predict` is the number a sweep, a validation suite or a search would record for the same case.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from rapidllm.engine.engine import ENGINES
from rapidllm.engine.engine import predict as simulate
from rapidllm.memory.closed_form import MemoryResult
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import price_case
from rapidllm.spec.case import Case, load_case, resolve_case
from rapidllm.spec.experiment import Experiment, expand_with_cases, load_experiment

Adjust = Callable[[pd.DataFrame], pd.DataFrame]

MEMORY_FIELDS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "framework", "capacity")
TRAINING_ONLY = ("mfu", "hfu")
INFERENCE_ONLY = ("ttft_s", "itl_s", "e2e_latency_s")


def memory_record(mem: MemoryResult) -> dict[str, Any]:
    """Bytes per memory component, peak and feasibility, as record columns."""
    rec: dict[str, Any] = {f"{f}_bytes": getattr(mem, f) for f in MEMORY_FIELDS}
    rec.update(peak_memory_bytes=mem.peak, feasible=mem.feasible, infeasible_reason=mem.reason)
    return rec


_WARNED: set[tuple[str, str]] = set()


def device_record(case: Case) -> dict[str, Any]:
    """`device_validated`: whether the device's three constants were fitted on its own validation rows. A
    device without rows (constants transferred from another, validate/transfer.py, or none given) warns
    once per process on stderr: its predictions carry the donor's error and more."""
    hw = case.hardware
    if not hw.validated and (hw.name, hw.utilization_from) not in _WARNED:
        _WARNED.add((hw.name, hw.utilization_from))
        origin = ("no utilization given: datasheet peaks (1.0)" if hw.utilization_from == "datasheet"
                  else f"constants transferred from {hw.utilization_from} (docs/transfer.md)")
        print(f"rapidllm: warning: device {hw.name} has no validation rows of its own; {origin}",
              file=sys.stderr)
    return {"device_validated": hw.validated}


def evaluate(case: Case, engine: str = "event", adjust: Adjust | None = None) -> dict[str, Any]:
    """Price, memory, graph and replay of one case in-process, as one flat record.

    engine: "event" (graph replay on the network simulator) or "baseline" (the alpha-beta ablation);
    adjust: rewrites operator times first (engine/measured.py). An infeasible case gets its memory and the
    reason, and no timing.
    """
    return _evaluate(case, engine, adjust)[0]


def _evaluate(case: Case, engine: str, adjust: Adjust | None) -> tuple[dict[str, Any], MemoryResult]:
    mem = memory_for_case(case)
    record: dict[str, Any] = {"case_id": case.case_id, **device_record(case)}
    if not mem.feasible:
        record.update(status="infeasible", reason=mem.reason, peak_memory_bytes=mem.peak, feasible=False)
        return record, mem
    result = simulate(case, price_case(case), mem, engine=engine, adjust=adjust)
    result.pop("infeasible_reason")
    record.update(status="ok", reason="", **result)
    return record, mem


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU bytes of the worst pipeline stage, by component, against the device's capacity."""
    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    framework: float
    capacity: float
    peak: float

    @property
    def feasible(self) -> bool:
        return self.peak <= self.capacity


@dataclass(frozen=True)
class Prediction:
    """A typed prediction. Fields that do not apply to the case's mode are None (MFU of an inference case,
    TTFT of a training step); timings are None when the case does not fit in memory (`status`
    "infeasible", `reason` says by how much)."""
    case_id: str
    mode: str
    status: str
    reason: str
    step_time_s: float | None
    compute_time_s: float | None
    exposed_comm_s: float | None
    bubble_s: float | None
    mfu: float | None
    hfu: float | None
    tokens_per_s: float | None
    ttft_s: float | None
    itl_s: float | None
    e2e_latency_s: float | None
    memory: MemoryBreakdown
    device_validated: bool = True    # False: the device has no validation rows of its own (docs/transfer.md)

    @property
    def feasible(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """Flat record: the README's `--json` keys plus `{component}_bytes` memory columns."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "memory"}
        out.update({f"{f.name}_bytes": getattr(self.memory, f.name) for f in fields(self.memory)
                    if f.name != "peak"})
        out.update(peak_memory_bytes=self.memory.peak, feasible=self.feasible)
        return out


def _applies(key: str, training: bool) -> bool:
    return not ((training and key in INFERENCE_ONLY) or (not training and key in TRAINING_ONLY))


def _as_case(case: Case | str | Path | Mapping[str, Any]) -> Case:
    if isinstance(case, Case):
        return case
    if isinstance(case, Mapping):
        return resolve_case(dict(case), "<mapping>")
    return load_case(case)


def predict(case: Case | str | Path | Mapping[str, Any], engine: str = "event",
            adjust: Adjust | None = None) -> Prediction:
    """Predict one case: a `Case`, a YAML path, or a mapping with the keys of a case file.

    >>> import rapidllm
    >>> p = rapidllm.predict("examples/gpt175b-tp8-pp8.yaml")   # doctest: +SKIP
    >>> p.step_time_s, p.memory.activations                            # doctest: +SKIP
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; allowed: {', '.join(ENGINES)}")
    resolved = _as_case(case)
    rec, mem_result = _evaluate(resolved, engine, adjust)
    mem = memory_record(mem_result)
    ok = rec["status"] == "ok"

    def timing(key: str) -> float | None:
        if not ok or not _applies(key, resolved.training):
            return None
        return float(rec[key])

    memory = MemoryBreakdown(**{f: float(mem[f"{f}_bytes"]) for f in MEMORY_FIELDS},
                             peak=float(mem["peak_memory_bytes"]))
    return Prediction(case_id=rec["case_id"], mode="training" if resolved.training else "inference",
                      status=rec["status"], reason=rec["reason"],
                      **{k: timing(k) for k in ("step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s",
                                                "mfu", "hfu", "tokens_per_s", "ttft_s", "itl_s",
                                                "e2e_latency_s")},
                      memory=memory, device_validated=bool(rec["device_validated"]))


def predict_many(cases: Iterable[Case | str | Path | Mapping[str, Any]], engine: str = "event") -> pd.DataFrame:
    """One row per case (`Prediction.to_dict`), in input order."""
    return pd.DataFrame([predict(c, engine).to_dict() for c in cases])


def sweep(experiment: Experiment | str | Path, progress: bool = False, engine: str = "event") -> pd.DataFrame:
    """Every combination of an experiment, evaluated in-process: one row per combination, invalid and
    infeasible ones kept with their reason (what `rapidllm sweep` writes)."""
    from tqdm import tqdm

    exp = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
    out = []
    for row, case in tqdm(expand_with_cases(exp), desc=exp.name, unit="case", disable=not progress):
        if row["status"] != "ok" or case is None:
            out.append(row)
            continue
        out.append({**row, **evaluate(case, engine)})
    return pd.DataFrame(out).drop(columns=["case_json"])
