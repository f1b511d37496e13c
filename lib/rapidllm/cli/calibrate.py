"""`rapidllm calibrate`: fit the three utilizations per device on the suites' calibration rows and freeze
them in config/hardware/<device>.yaml (rerun whenever the engine changes)."""
from __future__ import annotations

import argparse
from pathlib import Path

from rapidllm.cli.common import output_path, write_output
from rapidllm.spec.errors import SpecError

# The fit's work bounds (docs/limits.md): grid^3 coarse points (64^3 = 262,144, 2,000x the default 5^3) and
# Nelder-Mead iterations (80x the default 120); --grid 1000000 asked for 1e18 evaluations.
MAX_GRID, MAX_ITERS = 64, 10000


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("calibrate", help="fit compute/HBM/network utilization per device on the "
                              "suites' calibration rows and write them into config/hardware")
    p.add_argument("suites", nargs="*", help="suite YAMLs (default: the `suites` list of config/config.yaml)")
    p.add_argument("--grid", type=int, default=5, help="coarse grid points per constant (default 5)")
    p.add_argument("--iters", type=int, default=120, help="Nelder-Mead iterations (default 120)")
    p.add_argument("--dry-run", action="store_true", help="fit and print, do not write config/hardware")
    p.add_argument("--out", help="also write the fitted constants as CSV here")
    p.add_argument("--transfer-report", metavar="CSV",
                   help="do not calibrate: write in-sample, leave-one-suite-out and leave-one-device-out MAPE "
                        "per suite, group and overall to CSV (docs/transfer.md); config/hardware is not touched")
    p.add_argument("--implied", metavar="CSV",
                   help="do not calibrate: write, for every scored row, the compute constant at which the model "
                        "would match it (docs/transfer.md); config/hardware is not touched")
    p.set_defaults(func=run)


def default_suites() -> list[Path]:
    from rapidllm.spec.paths import project_root
    from rapidllm.spec.schema import load_yaml

    root = project_root()
    names = load_yaml(root / "config" / "config.yaml").get("suites", [])
    return [root / "validation" / "suites" / f"{n}.yaml" for n in names]


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from rapidllm.pipeline.io import write_table
    from rapidllm.validate.calibrate import calibrate

    paths = [Path(p) for p in args.suites] or default_suites()
    if not (1 <= args.grid <= MAX_GRID and 0 <= args.iters <= MAX_ITERS):
        raise SpecError(f"rapidllm calibrate: --grid must be 1 to {MAX_GRID} and --iters 0 to {MAX_ITERS}")
    out = output_path(args.out, "calibration table") if args.out else None
    if args.transfer_report:
        from rapidllm.validate.loo import transfer_report
        from rapidllm.validate.suites import load_suite

        report_out = output_path(args.transfer_report, "transfer report")
        report = transfer_report([load_suite(p) for p in paths], grid=args.grid, iters=args.iters)
        write_output(lambda p: write_table(report, p), report_out, "transfer report")
        print(report[report.scope != "group"].to_string(index=False))
        return 0
    if args.implied:
        from rapidllm.validate.implied import implied_report
        from rapidllm.validate.suites import load_suite

        implied_out = output_path(args.implied, "implied-constant table")
        table = implied_report([load_suite(p) for p in paths])
        write_output(lambda p: write_table(table, p), implied_out, "implied-constant table")
        return 0
    results = calibrate(paths, grid=args.grid, iters=args.iters, write=not args.dry_run)
    if out is not None:
        write_output(lambda p: write_table(pd.DataFrame(results), p), out, "calibration table")
    return 0
