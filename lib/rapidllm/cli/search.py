"""`rapidllm search SPEC.yaml`: the best parallel layouts of a model on a cluster (docs/search.md).

Prints the ranked top-k of every candidate and GPU count with their breakdown and the counts of what was
pruned and why; writes ranked.csv / .parquet, counts.json and the Pareto figure (staged, moved in only when
complete, so Ctrl-C leaves nothing).
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rapidllm.cli.common import check_flags, output_dir, print_json

if TYPE_CHECKING:
    import pandas as pd

    from rapidllm.search.spec import SearchSpec


def add_parser(sub: argparse._SubParsersAction) -> None:
    q = sub.add_parser("search", help="best parallel layouts of a model on a cluster (docs/search.md)")
    q.add_argument("spec", help="search spec YAML (workflow/schemas/search.schema.yaml)")
    q.add_argument("--top", type=int, help="layouts kept (and shown) per candidate and GPU count (default: the "
                   "spec's top, else 10)")
    q.add_argument("--json", action="store_true", help="objective, counts and ranked rows as JSON")
    q.add_argument("--out", help="folder for ranked.csv/.parquet, counts.json, pareto.png (default results/search/NAME)")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rapidllm.pipeline.search import summary, write_search
    from rapidllm.search import load_search, search
    from rapidllm.search.run import check_not_empty

    if args.top is not None:
        check_flags("search_flags", {"top": args.top}, "search")
    spec = load_search(args.spec)
    out = output_dir(args.out or f"results/search/{spec.name}", "search output folder")
    try:
        df = search(spec, progress=not (args.quiet or args.json), top=args.top)
        check_not_empty(df, spec)
        written = write_search(df, spec, out)
    except KeyboardInterrupt:
        print("search interrupted: no output files written", file=sys.stderr)
        return 130
    if args.json:
        print_json(summary(df), indent=2)
        return 0
    print(table(df, spec).to_string(index=False))
    print(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in df.attrs["counts"].items() if k != "invalid_by_rule"))
    print(f"-> {', '.join(str(p) for p in written)}")
    return 0


def table(df: pd.DataFrame, spec: SearchSpec) -> pd.DataFrame:
    """The terminal's view of the ranked layouts: every kept row (the top k of each candidate and GPU count,
    so the best of every group shows), each axis that tells two layouts apart (sp and the attention kernel
    too), the objective, the time and its breakdown, and the peak memory in GiB."""
    training = spec.candidates[0].base.training
    cols = ["rank", "candidate", "gpus", "dp", "tp", "pp", "cp", "ep"] + (
        ["sp", "micro_batch", "recompute", "zero", "schedule", "virtual_stages"] if training else ["batch"]) + [
        "attention_impl", spec.objective.name] + (
        ["step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s"] if training else
        ["ttft_s", "itl_s", "e2e_latency_s", "compute_time_s", "exposed_comm_s"])
    view = df[list(dict.fromkeys(cols))].copy()
    view["peak_GiB"] = (df["peak_memory_bytes"] / 2**30).round(2)
    return view
