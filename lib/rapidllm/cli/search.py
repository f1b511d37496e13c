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
    from rapidllm.search.counts import REASONS, breakdown_lines, check_not_empty

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
    note = spec.cost_note()
    if note:
        print(f"note: {note}")
    counts = df.attrs["counts"]
    print(", ".join(f"{k.replace('_', ' ')} {counts[k]}" for k in ("layouts", "evaluated", "ranked", *REASONS)))
    for line in breakdown_lines(counts):
        print(line)
    for switch, n in counts.get("overlaps", {}).items():
        print(overlap_line(switch, n))
    print(f"-> {', '.join(str(p) for p in written)}")
    return 0


def overlap_line(switch: str, n: dict[str, int]) -> str:
    """One line on how many layouts ran with and without an overlap switch that applies to some of them;
    when it was on in none, how to search it (it is off by default, as in Megatron-Core)."""
    line = (f"{switch}: on in {n['layouts_on']:,} layouts ({n['evaluated_on']:,} simulated), off in "
            f"{n['layouts_off']:,} ({n['evaluated_off']:,} simulated; {n['applies_off']:,} of them where it applies)")
    if not n["layouts_on"]:
        line += f"; space.{switch}: [true] turns it on wherever it applies, [false, true] searches both"
    return line


def table(df: pd.DataFrame, spec: SearchSpec) -> pd.DataFrame:
    """The terminal's view of the ranked layouts: every kept row (the top k of each candidate and GPU count,
    so the best of every group shows), each axis that tells two layouts apart (sp, the attention kernel and
    the overlap switches the space searches too), the objective, the time and its breakdown, MFU and tokens/s
    per GPU (training: the first plausibility check), and the peak memory in GiB and as % of the HBM (the
    memory model leaves out fragmentation: a row near 100% is one to filter, docs/search.md)."""
    from rapidllm.spec.case import OVERLAP_SWITCHES

    training = spec.candidates[0].base.training
    cols = ["rank", "candidate", "gpus", "dp", "tp", "pp", "cp", "ep"] + (
        ["sp", "micro_batch", "recompute", "zero", "schedule", "virtual_stages"] if training else ["batch"]) + [
        "attention_impl", *(s for s in OVERLAP_SWITCHES if s in spec.space), spec.objective.name] + (
        ["step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s", "mfu"] if training else
        ["ttft_s", "itl_s", "e2e_latency_s", "compute_time_s", "exposed_comm_s"])
    view = df[list(dict.fromkeys(cols))].copy()
    if training and "tokens_per_s_per_gpu" not in view:
        view["tokens_per_s_per_gpu"] = (df["tokens_per_s"] / df["gpus"]).round(1)
    view["peak_GiB"] = (df["peak_memory_bytes"] / 2**30).round(2)
    view["peak_%"] = (100 * df["peak_memory_bytes"] / df["capacity_bytes"]).round(1)
    return view
