"""Error metrics reported the way the RAPID-LLM paper does: MAPE and max absolute percentage error.

errors.csv has one line per (scope, name, basis, split): scope `suite` (one suite), `metric` (one metric of a
multi-metric suite, name "suite:metric"), `group` (the paper's regimes: suites of one group together),
`overall` (every suite with in_overall) and `all_suites` (every suite). Splits: calibration, held_out, all.
`rows` counts reference rows, `entries` scored entries (a NIM row scores TTFT, ITL and throughput).
`basis`: `full` scores every metric a reference publishes; `paper` scores the one quantity per case the
RAPID-LLM paper scores (validate/suites.py), the like-for-like comparison with `paper_mape_pct`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# The RAPID-LLM paper's MAPE per regime (§5.2-5.3), the target for each group.
PAPER_MAPE_PCT = {"inference_a100": 9.8, "inference_h100": 5.4, "training_dense_a100": 9.9,
                  "training_fsdp_h100": 13.2, "training_moe_h100": 6.7, "overall": 10.0}
ERROR_COLUMNS = ["scope", "name", "basis", "split", "rows", "entries", "mape_pct", "max_error_pct", "paper_mape_pct"]


def on_basis(rows: pd.DataFrame, basis: str) -> pd.DataFrame:
    """Entries scored on `basis` ('full' or 'paper'); rows without a basis column count on both."""
    if "basis" not in rows:
        return rows
    return rows[rows.basis.isin(("both", basis))]


def percentage_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Signed error (predicted - measured) / measured, in percent."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    return 100.0 * (predicted - measured) / measured


def mape_of(errors_pct: np.ndarray) -> float:
    """Mean absolute percentage error of signed percentage errors (NaN for none): the one MAPE every
    table, figure and test of the project reports."""
    errors_pct = np.asarray(errors_pct, float)
    return float(np.mean(np.abs(errors_pct))) if len(errors_pct) else float("nan")


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return mape_of(percentage_errors(predicted, measured))


def max_error(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.max(np.abs(percentage_errors(predicted, measured))))


def time_weighted_mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Σ|p - m| / Σm x 100: long kernels weigh more (the paper's GEMM metric)."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    return float(100.0 * np.abs(predicted - measured).sum() / measured.sum())


def _splits(rows: pd.DataFrame):
    yield "calibration", rows[rows.calibration.astype(bool)]
    yield "held_out", rows[~rows.calibration.astype(bool)]
    yield "all", rows


def error_summary(rows: pd.DataFrame, suite: str) -> list[dict]:
    """Per-basis and per-split (calibration / held_out / all) MAPE, max error and entry count of one suite's
    rows; the paper basis only where it differs from the full one."""
    out = []
    differs = "basis" in rows and bool((rows.basis != "both").any())
    for basis in ("full", "paper") if differs else ("full",):
        for split, sel in _splits(on_basis(rows, basis)):
            if len(sel) == 0:
                continue
            out.append({"suite": suite, "basis": basis, "split": split, "rows": int(len(sel)),
                        "mape_pct": mape(sel.predicted, sel.measured),
                        "max_error_pct": max_error(sel.predicted, sel.measured)})
    return out


def _records(rows: pd.DataFrame, scope: str, name: str, basis: str, paper: float | None) -> list[dict]:
    out = []
    for split, sel in _splits(rows):
        if len(sel) == 0:
            continue
        n_rows = len(sel[["suite", "row"]].drop_duplicates()) if "suite" in sel else len(sel)
        out.append({"scope": scope, "name": name, "basis": basis, "split": split, "rows": n_rows,
                    "entries": int(len(sel)), "mape_pct": mape(sel.predicted, sel.measured),
                    "max_error_pct": max_error(sel.predicted, sel.measured),
                    "paper_mape_pct": np.nan if paper is None else paper})
    return out


def errors_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Scored rows of every suite (status ok, finite prediction) -> the errors.csv table: suites, groups and
    overall on both bases, each metric of a multi-metric suite on its own."""
    ok = rows[(rows.status == "ok")].dropna(subset=["predicted", "measured"])
    recs: list[dict] = []
    for basis in ("full", "paper"):
        scored = on_basis(ok, basis)
        for suite, sel in scored.groupby("suite", sort=True):
            recs += _records(sel, "suite", str(suite), basis, PAPER_MAPE_PCT.get(str(sel.group.iloc[0])))
        for group, sel in scored.groupby("group", sort=True):
            recs += _records(sel, "group", str(group), basis, PAPER_MAPE_PCT.get(str(group)))
        if len(scored):
            recs += _records(scored[scored.in_overall.astype(bool)], "overall", "overall", basis,
                             PAPER_MAPE_PCT["overall"])
            recs += _records(scored, "all_suites", "all_suites", basis, None)
    for suite, sel in ok.groupby("suite", sort=True):
        if sel.metric.nunique() > 1:
            for metric, msel in sel.groupby("metric", sort=True):
                basis = "paper" if "basis" in msel and (msel.basis == "paper").all() else "full"
                recs += _records(msel, "metric", f"{suite}:{metric}", basis, None)
    return pd.DataFrame(recs, columns=ERROR_COLUMNS)
