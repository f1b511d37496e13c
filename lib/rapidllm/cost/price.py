"""Cost of a prediction: $ per step, $ per million tokens, tokens per dollar and per watt.

    $/hour (cluster)      = GPUs x $/GPU-hour                      (operating.py)
    $ per training step   = step time x $/hour / 3600
    $ per million tokens  = $/hour / (3600 x tokens/s) x 1e6       (tokens trained, or served for inference)
    tokens per $          = 1e6 / ($ per million tokens)
    tokens/s per watt     = tokens/s / (GPUs x board power x power utilisation)
    tokens/s per $capital = tokens/s / (GPUs x capital per GPU)

`price_prediction` prices one (case, prediction); `add_cost_columns` adds the same columns to a
`predict_many` / `sweep` / pipeline summary DataFrame, so a search can rank by any of them.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rapidllm.cost.config import HardwareCost, case_file_device, device_cost, hardware_cost
from rapidllm.cost.package import package_cost
from rapidllm.prediction import Prediction, replicas, replicas_served
from rapidllm.spec.case import Case, load_case, resolve_case

COST_COLUMNS = ("gpus", "usd_per_gpu_hour", "energy_usd_per_gpu_hour", "capital_usd_per_gpu_hour", "usd_per_hour",
                "usd_per_step", "usd_per_million_tokens", "tokens_per_usd", "tokens_per_s_per_watt",
                "tokens_per_s_per_capital_usd", "package_usd", "unit_usd")


def cost_record(hc: HardwareCost, gpus: int, mode: str, step_time_s: float | None,
                tokens_per_s: float | None, copies: int = 1) -> dict[str, float]:
    """The cost columns for one prediction (NaN where they do not apply: no $/step for inference, nothing
    rate-based without a positive token rate, no package cost for a spec with operating inputs only).
    `copies`: copies of `tokens_per_s` the `gpus` produce (`prediction.replicas_served`: an inference
    record's rate is one dp replica's)."""
    op = hc.operating
    usd_per_hour = gpus * op.usd_per_gpu_hour
    rate = tokens_per_s * copies if tokens_per_s and tokens_per_s > 0 else math.nan
    step = step_time_s if mode == "training" and step_time_s is not None else math.nan
    usd_m = usd_per_hour / (3600.0 * rate) * 1e6
    package = package_cost(hc.package) if hc.package is not None else None
    return {"gpus": gpus, "usd_per_gpu_hour": op.usd_per_gpu_hour, "energy_usd_per_gpu_hour": op.energy_usd_per_hour,
            "capital_usd_per_gpu_hour": op.capital_usd_per_hour, "usd_per_hour": usd_per_hour,
            "usd_per_step": step * usd_per_hour / 3600.0, "usd_per_million_tokens": usd_m,
            "tokens_per_usd": 1e6 / usd_m,
            "tokens_per_s_per_watt": rate / (gpus * op.board_power_w * op.power_utilization),
            "tokens_per_s_per_capital_usd": rate / (gpus * op.capital_per_gpu_usd),
            "package_usd": package.package_usd if package else math.nan,
            "unit_usd": package.unit_usd if package else math.nan}


def price_prediction(case: Case, prediction: Prediction | Mapping[str, Any],
                     cost: HardwareCost | None = None) -> dict[str, float]:
    """Cost columns of one prediction (`rapidllm.predict` or an `evaluate` record) of `case`.

    cost: the device's inputs; by default the `cost:` section of config/hardware/{case.hardware.name}.yaml
    (an inline hardware mapping passes `hardware_cost(mapping)` here)."""
    rec = prediction.to_dict() if isinstance(prediction, Prediction) else dict(prediction)
    hc = cost if cost is not None else hardware_cost(case.hardware.name)
    mode = "training" if case.training else "inference"
    return cost_record(hc, case.parallelism.world, mode, rec.get("step_time_s"), rec.get("tokens_per_s"),
                       replicas_served(case))


def add_cost_columns(df: pd.DataFrame, costs: Mapping[str, HardwareCost] | None = None,
                     cases: Sequence[Case | str | Path | Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """`df` with COST_COLUMNS added (NaN for rows without a prediction).

    Rows name their device and GPU count in `hardware` and `world` (sweep and pipeline summaries and
    `predict_many` frames do); a frame without them passes the `cases` it was built from, in row order
    (cases, YAML paths or mappings). Each row's device is priced with, in this order: `costs[name]` (inputs
    given by hardware name), the `cost:` section of its case's inline device (a mapping or a YAML path among
    `cases`, as `rapidllm predict --cost` prices it: `cost.config.device_cost`; a `Case` keeps no cost
    inputs), else config/hardware/NAME.yaml's. An inline device without cost inputs of its own therefore
    needs `costs`, unless it keeps the name of the config device it copies."""
    out = df.copy()
    devices: list[Any] = [None] * len(out)          # each row's hardware entry, where its case gives one
    if cases is None:
        missing = [c for c in ("hardware", "world", "mode") if c not in out]
        if missing:
            raise ValueError(f"add_cost_columns: the frame has no {', '.join(missing)} column; a predict_many "
                             "frame without them needs cases=[...] (the cases it was built from, in row order)")
    else:
        if len(cases) != len(out):
            raise ValueError(f"{len(cases)} cases for {len(out)} rows")
        devices = [None if isinstance(c, Case) else c.get("hardware") if isinstance(c, Mapping)
                   else case_file_device(c) for c in cases]
        cases = [c if isinstance(c, Case) else resolve_case(dict(c), "<mapping>") if isinstance(c, Mapping)
                 else load_case(c) for c in cases]
        out["hardware"] = [c.hardware.name for c in cases]
        out["world"] = [c.parallelism.world for c in cases]
        out["mode"] = ["training" if c.training else "inference" for c in cases]
        replicated = [replicas_served(c) for c in cases]
    if cases is None:                   # sweep and pipeline rows carry their layout
        replicated = [replicas(m == "training", 1 if pd.isna(d) else int(d))
                      for m, d in zip(out["mode"], out["dp"] if "dp" in out else [1] * len(out))]
    known = dict(costs or {})
    own: dict[tuple[str, str], HardwareCost] = {}       # (name, repr of a case's cost section) -> its inputs
    rows = []
    for i, (_, r) in enumerate(out.iterrows()):
        if r.get("status", "ok") != "ok" or pd.isna(r.get("tokens_per_s")):
            rows.append(dict.fromkeys(COST_COLUMNS, math.nan))
            continue
        name = str(r["hardware"])
        device = devices[i]
        if name not in known and isinstance(device, Mapping) and "cost" in device:
            key = (name, repr(device["cost"]))
            if key not in own:
                own[key] = device_cost(device, name, None, f"add_cost_columns: cases.{i}: hardware")
            hc = own[key]
        else:
            if name not in known:
                known[name] = hardware_cost(name)
            hc = known[name]
        step = r.get("step_time_s")
        rows.append(cost_record(hc, int(r["world"]), str(r["mode"]),
                                None if pd.isna(step) else float(step), float(r["tokens_per_s"]), replicated[i]))
    extra = pd.DataFrame(rows, index=out.index, columns=list(COST_COLUMNS))
    return pd.concat([out.drop(columns=[c for c in COST_COLUMNS if c in out]), extra], axis=1)
