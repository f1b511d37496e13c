"""What each scored row implies for the compute constant (docs/transfer.md, "Why the compute constant drifts").

A device's compute constant is one number fitted on several suites at once, and leave-one-out shows it moving
when a suite is removed (A100 0.716 -> 0.46 without Megatron, H100 0.527 -> 0.35 without MPT). To see which
rows pull it where, each row is asked on its own: at which compute constant would the model match it, with
HBM and network held at the device's constants?

To first order a predicted time is p(c) = A / c + B in the compute constant c: A is the work priced at a
fraction c of the tensor or vector peak, B everything that is not (HBM-bound kernels, exposed
communication, launches). Two evaluations, at the device's constant u and at u / 2, give A = u·(p(u/2) -
p(u)) and B = p(u) - A / u; the implied constant is A / (measured - B). It is a local estimate (the tile
model's max() terms switch bound as c moves), and a row whose compute share A / (u·p(u)) is below
MIN_SHARE does not constrain c at all (NaN), nor does one measured below B (no c is fast enough: NaN).
Time metrics end in `_s`; any other metric is a rate of the row's own work (`_per_s`, MFU) and is inverted
(1 / value) first, which is exact for a rate proportional to 1 / time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from rapidllm.prediction import evaluate
from rapidllm.spec.case import Case
from rapidllm.spec.experiment import expand_with_cases
from rapidllm.validate.calibrate import with_utilization
from rapidllm.validate.suites import Suite

MIN_SHARE = 0.05
COLUMNS = ["suite", "device", "row", "label", "calibration", "metric", "measured", "predicted", "error_pct",
           "compute_share", "implied_compute"]


def as_time(metric: str, value: float) -> float:
    """A metric's value as a time-like quantity: itself for seconds (`_s`), its reciprocal for rates
    (`_per_s`, MFU)."""
    return value if metric.endswith("_s") and not metric.endswith("_per_s") else 1.0 / value


def implied_constant(u: float, p_u: float, p_half: float, measured: float) -> tuple[float, float]:
    """(compute share at u, implied compute constant) from time-like predictions at u and u / 2 (module doc)."""
    a = u * (p_half - p_u)
    b = p_u - a / u
    share = a / (u * p_u)
    if share < MIN_SHARE or measured <= b:
        return share, float("nan")
    return share, a / (measured - b)


def case_implied(case: Case, measured: dict[str, float]) -> dict[str, tuple[float, float, float]]:
    """{metric: (prediction at the file's constants, compute share, implied compute constant)} for the
    measured metrics of one case; empty if the case does not evaluate."""
    hw = case.hardware.utilization
    u = np.array([hw.compute, hw.hbm, hw.network])
    at_u, at_half = evaluate(case), evaluate(with_utilization(case, u * [0.5, 1.0, 1.0]))
    if at_u.get("status") != "ok" or at_half.get("status") != "ok":
        return {}
    out = {}
    for metric, value in measured.items():
        if metric in at_u:
            p_u, p_half = (as_time(metric, float(r[metric])) for r in (at_u, at_half))
            out[metric] = (float(at_u[metric]),
                           *implied_constant(hw.compute, p_u, p_half, as_time(metric, float(value))))
    return out


def suite_implied(suite: Suite) -> pd.DataFrame:
    """One row per scored (row, metric) of the suite on the full basis, with the compute constant it
    implies; every device keeps its hardware file's HBM and network constants."""
    out = []
    for row, case in expand_with_cases(suite.experiment):
        if row["status"] != "ok" or case is None:
            continue
        measured = {m.metric: float(row[f"meta_measured_{m.metric}"]) for m in suite.metrics
                    if m.full_basis and np.isfinite(row.get(f"meta_measured_{m.metric}", np.nan))}
        for metric, (pred, share, c) in case_implied(case, measured).items():
            out.append({"suite": suite.name, "device": case.hardware.name, "row": int(row["meta_row"]),
                        "label": row["label"], "calibration": bool(row["meta_calibration"]), "metric": metric,
                        "measured": measured[metric], "predicted": pred,
                        "error_pct": round(100.0 * (pred / measured[metric] - 1.0), 2),
                        "compute_share": round(share, 3), "implied_compute": round(c, 3)})
    return pd.DataFrame(out, columns=COLUMNS)


def implied_report(suites: list[Suite]) -> pd.DataFrame:
    """suite_implied for every suite, concatenated in the given order; deterministic."""
    return pd.concat([suite_implied(s) for s in suites], ignore_index=True)


def compute_sweep(suite: Suite, device: str, constants: list[float]) -> list[tuple[float, float]]:
    """(compute constant, suite MAPE in %, all rows, full basis) with HBM and network at the device's file
    values: how precisely a transferred compute constant must land for a given leave-one-device-out MAPE."""
    from rapidllm.validate.loo import suite_rows
    from rapidllm.validate.transfer import device_spec

    hw = device_spec(device).utilization
    out = []
    for c in constants:
        rows = suite_rows(suite, {device: np.array([c, hw.hbm, hw.network])})
        out.append((c, float(np.mean(np.abs(rows.error_pct.dropna())))))
    return out


if __name__ == "__main__":   # the sweep quoted in docs/transfer.md: python -m rapidllm.validate.implied
    from rapidllm.spec.paths import project_root
    from rapidllm.validate.suites import load_suite

    grid = [round(0.40 + 0.02 * i, 2) for i in range(26)]
    for name, device in (("megatron_gpt_a100", "a100-sxm4-80gb"),
                         ("megatron_gpt_a100_korthikanti_table", "a100-sxm4-80gb"),
                         ("mpt_fsdp_h100", "h100-sxm5-80gb")):
        sweep = compute_sweep(load_suite(project_root() / "validation" / "suites" / f"{name}.yaml"), device, grid)
        print(name, " ".join(f"{c:.2f}:{m:.1f}" for c, m in sweep))
