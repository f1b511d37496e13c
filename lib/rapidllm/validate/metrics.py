"""Error metrics reported the way the RAPID-LLM paper does: MAPE and max absolute percentage error."""
from __future__ import annotations

import numpy as np
import pandas as pd


def percentage_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Signed error (predicted - measured) / measured, in percent."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    return 100.0 * (predicted - measured) / measured


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(percentage_errors(predicted, measured))))


def time_weighted_mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Σ|p - m| / Σm x 100: long kernels weigh more (the paper's GEMM metric)."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    return float(100.0 * np.abs(predicted - measured).sum() / measured.sum())


def error_summary(rows: pd.DataFrame, suite: str) -> list[dict]:
    """Per-split (calibration / held_out / all) MAPE, max error and row count of one suite's rows."""
    out = []
    for split, sel in (("calibration", rows[rows.calibration]), ("held_out", rows[~rows.calibration]), ("all", rows)):
        if len(sel) == 0:
            continue
        err = np.abs(percentage_errors(sel.predicted, sel.measured))
        out.append({"suite": suite, "split": split, "rows": int(len(sel)), "mape_pct": float(err.mean()),
                    "max_error_pct": float(err.max())})
    return out
