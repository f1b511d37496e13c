"""`rapidllm validate`: run validation suites and print MAPE per suite and split, then a footer with the
overall MAPE and the suites held out of it, so that an extension suite's large error (nanotron_h100) is not
read as the model's accuracy."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rapidllm.cli.common import output_dir, write_output

if TYPE_CHECKING:                       # pandas loads with the suites, not with every command's parser
    import pandas as pd


def add_parser(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser("validate", help="run validation suites and print MAPE per suite")
    v.add_argument("suites", nargs="*", help="suite YAMLs (default: validation/suites/*.yaml)")
    v.add_argument("--out", default="results/validation", help="folder for per-suite CSVs")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from rapidllm.pipeline.io import write_table
    from rapidllm.prediction import sweep
    from rapidllm.spec.paths import project_root
    from rapidllm.validate.metrics import error_summary
    from rapidllm.validate.suites import compare, load_suite

    paths = [Path(p) for p in args.suites] or sorted((project_root() / "validation" / "suites").glob("*.yaml"))
    out = output_dir(args.out, "validation output folder")
    suites = [load_suite(path) for path in paths]           # every suite checked before any is run
    frames = []
    for suite in suites:
        rows = compare(suite, sweep(suite.experiment, progress=False))
        write_output(lambda p: write_table(rows, p), out / f"{suite.name}.csv", "suite table")
        frames.append(rows)
        for rec in error_summary(rows[rows.status == "ok"], suite.name):
            basis = " (paper basis)" if rec["basis"] == "paper" else ""
            print(f"{rec['suite']:28s} {rec['split']:12s} rows {rec['rows']:4d}  MAPE {rec['mape_pct']:6.2f}%  "
                  f"max {rec['max_error_pct']:6.2f}%{basis}")
    print("\n".join(footer(pd.concat(frames, ignore_index=True), every_suite=not args.suites)))
    return 0


def footer(rows: "pd.DataFrame", every_suite: bool) -> list[str]:
    """The overall MAPE on both bases and the suites outside it. The numbers are the `overall` lines of
    validate.metrics.errors_table (the errors.csv the pipeline writes and figures/accuracy.py draws), split
    `all`, so the CLI and the report cannot disagree; `every_suite` False says the overall covers only the
    suites named on the command line."""
    from rapidllm.validate.metrics import errors_table

    table = errors_table(rows)
    overall = table[(table.scope == "overall") & (table.split == "all")].set_index("basis")
    scope = "suites with in_overall" if every_suite else "suites run here with in_overall"
    if len(overall):
        # the paper basis scores one entry per row, the full basis every published metric of a row
        parts = [f"{basis} basis {overall.mape_pct[basis]:.2f}% ({overall[count][basis]} {count})"
                 for basis, count in (("paper", "rows"), ("full", "entries")) if basis in overall.index]
        lines = [f"overall MAPE, {scope}, all rows: " + ", ".join(parts)
                 + f"; the RAPID-LLM paper reports {overall.paper_mape_pct.iloc[0]:.1f}%"]
    else:
        lines = [f"overall MAPE: no scored rows in {scope}"]
    held = sorted(rows.loc[~rows.in_overall.astype(bool), "suite"].unique())
    if held:
        lines.append("not in overall (extensions, secondary tabulations and held-out checks; docs/validation.md "
                     "\"Suites\"): " + ", ".join(held))
    return lines
