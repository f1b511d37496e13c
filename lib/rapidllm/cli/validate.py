"""`rapidllm validate`: run validation suites and print MAPE per suite and split."""
from __future__ import annotations

import argparse
from pathlib import Path

from rapidllm.cli.common import output_dir, write_output


def add_parser(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser("validate", help="run validation suites and print MAPE per suite")
    v.add_argument("suites", nargs="*", help="suite YAMLs (default: validation/suites/*.yaml)")
    v.add_argument("--out", default="results/validation", help="folder for per-suite CSVs")
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rapidllm.pipeline.io import write_table
    from rapidllm.prediction import sweep
    from rapidllm.spec.paths import project_root
    from rapidllm.validate.metrics import error_summary
    from rapidllm.validate.suites import compare, load_suite

    paths = [Path(p) for p in args.suites] or sorted((project_root() / "validation" / "suites").glob("*.yaml"))
    out = output_dir(args.out, "validation output folder")
    suites = [load_suite(path) for path in paths]           # every suite checked before any is run
    for suite in suites:
        rows = compare(suite, sweep(suite.experiment, progress=False))
        write_output(lambda p: write_table(rows, p), out / f"{suite.name}.csv", "suite table")
        for rec in error_summary(rows[rows.status == "ok"], suite.name):
            basis = " (paper basis)" if rec["basis"] == "paper" else ""
            print(f"{rec['suite']:28s} {rec['split']:12s} rows {rec['rows']:4d}  MAPE {rec['mape_pct']:6.2f}%  "
                  f"max {rec['max_error_pct']:6.2f}%{basis}")
    return 0
