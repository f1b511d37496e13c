"""Command line: predict, sweep, validate, gemm, collective (DESIGN §6).

Bad input prints one message per problem (file: key: what is allowed) and exits 2, never a traceback.
`--json` output uses stable snake_case keys with SI units in their names.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from rapidllm.spec.errors import SpecError

# Subcommands that live next to their model: each module has add_parser(subparsers).
EXTRA_COMMANDS: tuple[str, ...] = ("rapidllm.ops.cli_gemm", "rapidllm.network.cli_collective",
                                   "rapidllm.validate.cli_calibrate")

JSON_KEYS = ("case_id", "status", "reason", "step_time_s", "compute_time_s", "exposed_comm_s", "bubble_s",
             "mfu", "hfu", "tokens_per_s", "ttft_s", "itl_s", "e2e_latency_s", "peak_memory_bytes", "feasible")


def _clean(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value.item() if hasattr(value, "item") else value


def cmd_predict(args: argparse.Namespace) -> int:
    from rapidllm.engine.measured import adjuster
    from rapidllm.prediction import evaluate
    from rapidllm.spec.case import load_case

    case = load_case(args.case)
    record = evaluate(case, args.engine, adjuster(args.measured, args.what_if or ()))
    out = {k: _clean(record.get(k)) for k in JSON_KEYS if k in record}
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=False))
        return 0
    print(f"case {out['case_id']}: {case.model.name} on {case.parallelism.world} x {case.hardware.name} ({case.network.name})")
    if out["status"] != "ok":
        print(f"  infeasible: {out['reason']}")
        return 0
    for key, value in out.items():
        if key not in ("case_id", "status", "reason") and value:
            print(f"  {key:20s} {value:.6g}" if isinstance(value, float) else f"  {key:20s} {value}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from rapidllm.pipeline.io import write_table
    from rapidllm.prediction import sweep
    from rapidllm.spec.experiment import load_experiment

    exp = load_experiment(args.experiment)
    df = sweep(exp, progress=not args.quiet)
    out = Path(args.out or f"results/{exp.name}/sweep.csv")
    write_table(df, out)
    counts = df.status.value_counts().to_dict()
    print(f"{len(df)} cases -> {out} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from rapidllm.pipeline.io import write_table
    from rapidllm.prediction import sweep
    from rapidllm.spec.paths import project_root
    from rapidllm.validate.metrics import error_summary
    from rapidllm.validate.suites import compare, load_suite

    paths = [Path(p) for p in args.suites] or sorted((project_root() / "validation" / "suites").glob("*.yaml"))
    for path in paths:
        suite = load_suite(path)
        rows = compare(suite, sweep(suite.experiment, progress=False))
        write_table(rows, Path(args.out) / f"{suite.name}.csv")
        for rec in error_summary(rows[rows.status == "ok"], suite.name):
            basis = " (paper basis)" if rec["basis"] == "paper" else ""
            print(f"{rec['suite']:28s} {rec['split']:12s} rows {rec['rows']:4d}  MAPE {rec['mape_pct']:6.2f}%  "
                  f"max {rec['max_error_pct']:6.2f}%{basis}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from rapidllm.pipeline.search import summary, write_search
    from rapidllm.search import load_search, search
    from rapidllm.search.run import check_not_empty

    spec = load_search(args.spec)
    try:
        df = search(spec, progress=not (args.quiet or args.json), top=args.top)
        check_not_empty(df, spec)
        written = write_search(df, spec, args.out or f"results/search/{spec.name}")
    except KeyboardInterrupt:
        print("search interrupted: no output files written", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(summary(df), indent=2))
        return 0
    training = spec.candidates[0].base.training
    cols = ["rank", "candidate", "gpus", "dp", "tp", "pp", "cp", "ep"] + (
        ["micro_batch", "recompute", "zero", "schedule", "virtual_stages"] if training else ["batch"]) + [
        spec.objective.name, "compute_time_s", "exposed_comm_s"] + (
        ["bubble_s"] if training else ["ttft_s", "itl_s"]) + ["peak_memory_bytes"]
    print(df[list(dict.fromkeys(cols))].head(args.top or spec.top).to_string(index=False))
    print(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in df.attrs["counts"].items() if k != "invalid_by_rule"))
    print(f"-> {', '.join(str(p) for p in written)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rapidllm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict one case")
    p.add_argument("case", help="case YAML")
    p.add_argument("--json", action="store_true", help="stable JSON output")
    p.add_argument("--engine", choices=("event", "baseline"), default="event",
                   help="event: graph replay on the network simulator; baseline: alpha-beta ablation")
    p.add_argument("--measured", metavar="FILE", help="CSV name,time_s[,section,phase] of measured operator times")
    p.add_argument("--what-if", action="append", metavar="NAME=xF|/F|TIME",
                   help="scale (x0.5), speed up (/2) or set (1 ms) one operator's time; repeatable")
    p.set_defaults(func=cmd_predict)
    s = sub.add_parser("sweep", help="run an experiment sweep in-process with a progress bar")
    s.add_argument("experiment", help="experiment YAML")
    s.add_argument("--out", help="output CSV (default results/NAME/sweep.csv)")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_sweep)
    v = sub.add_parser("validate", help="run validation suites and print MAPE per suite")
    v.add_argument("suites", nargs="*", help="suite YAMLs (default: validation/suites/*.yaml)")
    v.add_argument("--out", default="results/validation", help="folder for per-suite CSVs")
    v.set_defaults(func=cmd_validate)
    q = sub.add_parser("search", help="best parallel layouts of a model on a cluster (docs/search.md)")
    q.add_argument("spec", help="search spec YAML (workflow/schemas/search.schema.yaml)")
    q.add_argument("--top", type=int, help="layouts kept per GPU count (default: the spec's top, else 10)")
    q.add_argument("--json", action="store_true", help="objective, counts and ranked rows as JSON")
    q.add_argument("--out", help="folder for ranked.csv/.parquet, counts.json, pareto.png (default results/search/NAME)")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_search)
    for module in EXTRA_COMMANDS:
        __import__(module, fromlist=["add_parser"]).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpecError as err:
        print(str(err), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
