"""`rapidllm sweep`: every combination of an experiment, evaluated in-process, written as one table."""
from __future__ import annotations

import argparse
from pathlib import Path

from rapidllm.cli.common import output_path, write_output


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("sweep", help="run an experiment sweep in-process with a progress bar")
    s.add_argument("experiment", help="experiment YAML")
    s.add_argument("--out", help="output CSV (default results/NAME/sweep.csv)")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rapidllm.pipeline.io import write_table
    from rapidllm.prediction import sweep
    from rapidllm.spec.experiment import load_experiment

    exp = load_experiment(args.experiment)
    out = output_path(args.out or f"results/{exp.name}/sweep.csv", "sweep output")
    df = sweep(exp, progress=not args.quiet)
    write_output(lambda p: write_table(df, p), out, "sweep table")
    counts = df.status.value_counts().to_dict()
    print(f"{len(df)} cases -> {out} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    return 0
