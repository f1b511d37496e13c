"""`rapidllm sweep`: every combination of an experiment, evaluated in-process, written as one table.

Rows a case rule rejects stay in the table as 'invalid' with the reason; but when every row is invalid the
mistake is the experiment's (a bad base value), so the first reason is the error and nothing is written.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rapidllm.cli.common import output_path, write_output


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
    print(f"{len(df)} cases -> {out} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    return 0
