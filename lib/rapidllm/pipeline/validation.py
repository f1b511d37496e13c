"""The validate stage: suite summaries -> per-row comparison CSVs and errors.csv."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from rapidllm.pipeline.io import write_table
from rapidllm.validate.metrics import error_summary
from rapidllm.validate.suites import compare, load_suite

ERROR_COLUMNS = ["suite", "split", "rows", "mape_pct", "max_error_pct"]


def run_validate_suite(suite_path: str | Path, summary: str | Path, out: str | Path) -> pd.DataFrame:
    suite = load_suite(suite_path)
    rows = compare(suite, pd.read_parquet(summary))
    write_table(rows, out)
    return rows


def run_errors(suite_csvs: list[str], out: str | Path) -> pd.DataFrame:
    """MAPE and max error per suite (calibration, held-out, all) and over every suite."""
    records, scored = [], []
    for path in sorted(suite_csvs):
        rows = pd.read_csv(path)
        ok = rows[rows.status == "ok"].dropna(subset=["predicted", "measured"])
        if len(ok):
            records += error_summary(ok, str(rows.suite.iloc[0]))
            scored.append(ok)
    if scored:
        records += error_summary(pd.concat(scored), "overall")
    df = pd.DataFrame(records, columns=ERROR_COLUMNS)
    write_table(df, out)
    return df
