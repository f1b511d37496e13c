"""`rapidllm sweep`: every combination of an experiment, evaluated in-process, written as one table.

Rows a case rule rejects stay in the table as 'invalid' with the reason; but when every row is invalid the
mistake is the experiment's (a bad base value), so the first reason is the error and nothing is written.
A short summary (the first SUMMARY_ROWS rows, the headline numbers of each) is printed before the path, so
the answer to a small what-if sweep is on the screen, not only in the file.
"""
from __future__ import annotations

import argparse
import math
import numbers
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rapidllm.cli.common import output_path, plain_number, write_output

if TYPE_CHECKING:                       # pandas loads with the sweep, not with every command's parser
    import pandas as pd

SUMMARY_ROWS = 20
LABEL_WIDTH = 72                  # at most; a longer label loses its middle (both ends tell rows apart)
# (header, column, scale, the modes it applies to) of the summary: a sweep table holds 0 where a column does
# not apply to a row's mode (TTFT of training, MFU of inference), which the summary leaves blank
BOTH = ("training", "inference")
SUMMARY_COLUMNS = (("step/e2e s", "step_time_s", 1.0, BOTH), ("TTFT ms", "ttft_s", 1e3, ("inference",)),
                   ("ITL ms", "itl_s", 1e3, ("inference",)), ("tokens/s", "tokens_per_s", 1.0, BOTH),
                   ("MFU %", "mfu", 100.0, ("training",)), ("peak GiB", "peak_memory_bytes", 2.0**-30, BOTH))


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("sweep", help="run an experiment sweep in-process with a progress bar")
    s.add_argument("experiment", help="experiment YAML")
    s.add_argument("--out", help="output table, .csv or .parquet (default results/NAME/sweep.csv)")
    s.add_argument("--quiet", action="store_true")
    s.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="processes evaluating cases, this one and N-1 workers (default 1; 0: one per available "
                        "core); the table is identical")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rapidllm.pipeline.io import write_table
    from rapidllm.prediction import JOBS_ALLOWED, MAX_JOBS, resolve_jobs, sweep
    from rapidllm.spec.errors import SpecError
    from rapidllm.spec.experiment import load_experiment

    if not 0 <= args.jobs <= MAX_JOBS:
        raise SpecError(f"rapidllm sweep: --jobs: {args.jobs} is not allowed; {JOBS_ALLOWED}")
    if args.out and output_path(args.out, "sweep output").suffix not in (".csv", ".parquet"):
        raise SpecError(f"rapidllm sweep: --out: {args.out!r} is not allowed; allowed: a path ending in .csv "
                        "or .parquet")          # (anything else was written as parquet, silently)
    exp = load_experiment(args.experiment)
    out = output_path(args.out or f"results/{exp.name}/sweep.csv", "sweep output")
    try:
        df = sweep(exp, progress=not args.quiet, jobs=resolve_jobs(args.jobs))
        if len(df) and (df.status == "invalid").all():    # a mistake in the base, not a finding: no table
            raise SpecError(f"{df.reason.iloc[0]}; all {len(df)} cases of the sweep are invalid: no table written")
        write_output(lambda p: write_table(df, p), out, "sweep table")
    except KeyboardInterrupt:           # the pool is already terminated; the table is written atomically
        print("sweep interrupted: no output file written", file=sys.stderr)
        return 130
    counts = df.status.value_counts().to_dict()
    print("\n".join(summary(df)))
    print(f"{len(df)} cases -> {out} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    return 0


def summary(df: "pd.DataFrame", rows: int = SUMMARY_ROWS) -> list[str]:
    """The first `rows` rows of a sweep table as aligned text: label, status and the headline numbers of the
    sweep's modes (blank where a row has none: TTFT of training, anything of an invalid row). The file keeps
    every column; this is a glance, not a second format."""
    modes = set(df["mode"].dropna()) if "mode" in df else set(BOTH)
    cols = [c for c in SUMMARY_COLUMNS if c[1] in df and modes & set(c[3])]
    shown = df.head(rows)
    labels = [_label(str(r.get("label") or r.get("case_id") or "")) for _, r in shown.iterrows()]
    width = max([5, *map(len, labels)])
    head = [("label", width), ("status", 10)] + [(c[0], max(10, len(c[0]))) for c in cols]
    lines = ["  ".join(f"{h:<{w}}" if i < 2 else f"{h:>{w}}" for i, (h, w) in enumerate(head))]
    for label, (_, r) in zip(labels, shown.iterrows()):
        cells = [f"{label:<{width}}", f"{r['status']:<10}"]
        for (_, col, scale, applies), (_, w) in zip(cols, head[2:]):
            v = r[col]
            ok = r.get("mode") in applies and isinstance(v, numbers.Real) and math.isfinite(v)
            cells.append(f"{plain_number(v * scale) if ok else '':>{w}}")
        lines.append("  ".join(cells).rstrip())
    if len(df) > rows:
        lines.append(f"... {len(df) - rows} more rows in the table")
    return lines


def _label(label: str) -> str:
    if len(label) <= LABEL_WIDTH:
        return label
    keep = (LABEL_WIDTH - 3) // 2
    return label[:keep] + "..." + label[len(label) - (LABEL_WIDTH - 3 - keep):]
