"""The validate stage: suite summaries -> per-row comparison CSVs and errors.csv."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from rapidllm.pipeline.io import write_table
from rapidllm.validate.metrics import ERROR_COLUMNS, errors_table
from rapidllm.validate.suites import compare, load_suite


def run_validate_suite(suite_path: str | Path, summary: str | Path, out: str | Path) -> pd.DataFrame:
    suite = load_suite(suite_path)
    rows = compare(suite, pd.read_parquet(summary))
    write_table(rows, out)
    return rows


def run_errors(suite_csvs: list[str], out: str | Path) -> pd.DataFrame:
    """MAPE and max error per suite, metric, group and overall (calibration, held-out, all)."""
    frames = [pd.read_csv(p, keep_default_na=False, na_values=[""]) for p in sorted(suite_csvs)]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    df = errors_table(rows) if len(rows) else pd.DataFrame(columns=ERROR_COLUMNS)
    write_table(df, out)
    return df
