"""`rapidllm collective`: time one collective on a network (a name, a network file, or a case file's network)
with the link-queue simulator.

The flags are checked by workflow/schemas/collective.schema.yaml (the bounds of docs/limits.md), and the
work (transfers to schedule) is bounded before the topology is built.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

from rapidllm.cli.common import check_flags, print_json
from rapidllm.spec.errors import SpecError
from rapidllm.spec.named import resolve_named
from rapidllm.spec.network import FaultSpec, NetworkSpec
from rapidllm.spec.paths import display
from rapidllm.spec.schema import load_yaml
from rapidllm.units import parse_quantity

# the collectives of network/collectives.py (SUPPORTED; tests/test_network_cli.py checks they agree), listed
# here so `rapidllm --help` and flag errors do not load the numba simulator
OPS = ("all_gather", "all_reduce", "all_to_all", "broadcast", "reduce_scatter", "send_recv")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("collective", help="simulate one collective on a network",
                              description="Simulate one collective with the link-queue network model.")
    p.add_argument("--network", required=True,
                   help="network name (config/networks/NAME.yaml), a network YAML file, or a case YAML file "
                        "(its network, named or inline, and its faults)")
    p.add_argument("--op", default="all_reduce", choices=OPS)
    p.add_argument("--bytes", required=True, help="message size with a unit, e.g. 1GiB or '64 MB'")
    p.add_argument("--ranks", default=None,
                   help="rank count N (ranks 0..N-1) or a comma list of rank ids (send_recv: SRC,DST); default: "
                        "every rank of the network, and one node of a fabric whose size is auto (a case file "
                        "with faults: its world, the fabric its fault ids name)")
    p.add_argument("--algorithm", default="auto",
                   help="auto, ring, direct, halving_doubling, tree, hierarchical, in_switch (all_reduce)")
    p.add_argument("--chunks", type=int, default=None,
                   help="pipelined chunks per transfer (default: from the network's chunk_size, 4 MiB)")
    p.add_argument("--utilization", type=float, default=None, help="link bandwidth factor (default: network's)")
    p.add_argument("--fault", action="append", default=[], metavar="A,B,FACTOR|A,B,dead",
                   help="degrade (factor in (0,1]) or kill the link between nodes A and B; repeatable")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=run)
    return p


def parse_fault(text: str) -> FaultSpec:
    parts = [x.strip() for x in text.split(",")]
    try:
        a, b, what = int(parts[0]), int(parts[1]), parts[2]
        if len(parts) != 3 or a < 0 or b < 0:
            raise ValueError
        if what.lower() in ("dead", "failed"):
            return FaultSpec(link=(a, b), failed=True)
        factor = float(what)
    except (ValueError, IndexError):
        raise SpecError(f"rapidllm collective: --fault: {text!r} is not A,B,FACTOR or A,B,dead "
                        "(A, B global node ids >= 0)") from None
    if not 0 < factor <= 1:
        raise SpecError(f"rapidllm collective: --fault: bandwidth factor {what} must be in (0, 1]")
    return FaultSpec(link=(a, b), bandwidth_factor=factor)


def _ranks(text: str | None) -> int | list[int] | None:
    if text is None:
        return None
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise SpecError(f"rapidllm collective: --ranks: {text[:60]!r} is not a count or a comma list of rank "
                        "ids") from None
    return vals[0] if len(vals) == 1 else vals


def network_arg(text: str) -> tuple[NetworkSpec, tuple[FaultSpec, ...], int]:
    """The --network value: a name from config/networks, a network file, or a case file (its `network`,
    named or inline, plus its `faults`), and the fewest ranks to size it for: a case's faults name node ids
    of the fabric sized for the case's world (switch ids follow the ranks), so that world, else 1. A path is
    recognised by a .yaml/.yml suffix or by existing."""
    path = Path(text)
    if path.suffix not in (".yaml", ".yml") and not path.is_file():
        mapping, where = resolve_named("network", text, "rapidllm collective", "--network")
        return NetworkSpec.from_mapping(mapping, where), (), 1
    source = display(path)
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise SpecError.at(source, "", "expected a network mapping (dimensions: ...) or a case (network: ...)")
    if "dimensions" in data:
        mapping, where = resolve_named("network", data, source, "(top level)")
        return NetworkSpec.from_mapping(mapping, where), (), 1
    if "network" not in data:
        raise SpecError.at(source, "network", "missing: a network file needs `dimensions`, a case file `network`")
    mapping, where = resolve_named("network", data["network"], source, "network", folder=path.parent)
    faults = data.get("faults", [])
    if not isinstance(faults, list) or not all(isinstance(f, dict) and "link" in f for f in faults):
        raise SpecError.at(source, "faults", "expected a list of {link: [a, b], ...} mappings")
    if faults:                          # [0, 64] on 64 GPUs is rank 0's NVSwitch, on 8 it is no cable
        from rapidllm.spec.case import load_case
        world = load_case(path).parallelism.world
    else:
        world = 1
    return NetworkSpec.from_mapping(mapping, where), tuple(FaultSpec.from_mapping(f) for f in faults), world


def run(args: argparse.Namespace) -> int:
    from rapidllm.network.api import check_work, simulate_collective   # numba: loaded only to simulate

    ranks = _ranks(args.ranks)
    check_flags("collective", {"network": args.network, "op": args.op, "bytes": args.bytes, "ranks": ranks,
                               "algorithm": args.algorithm, "chunks": args.chunks,
                               "utilization": args.utilization}, "collective")
    nbytes = parse_quantity(args.bytes, "bytes")
    faults = tuple(parse_fault(f) for f in args.fault)
    net, case_faults, case_world = network_arg(args.network)
    where = args.network
    if ranks is not None:
        try:
            check_work(args.op, ranks if isinstance(ranks, int) else len(ranks), args.chunks or 1)
        except SpecError as err:
            raise SpecError(f"rapidllm collective: --ranks: {err}") from None
    world = max(ranks if isinstance(ranks, int) else (max(ranks) + 1 if ranks else 1), case_world)
    net = net.sized_for(world, where) if net.dimensions[-1].size == 0 else net
    net = replace(net, faults=net.faults + case_faults + faults)
    try:
        res = simulate_collective(net, args.op, nbytes, ranks, algorithm=args.algorithm, chunks=args.chunks,
                                  utilization=args.utilization)
    except SpecError as err:
        raise SpecError([f"rapidllm collective: {line}" for line in err.lines]) from None
    out = {"network": net.name, "op": args.op, "bytes": nbytes, "ranks": ranks if ranks is not None else net.total_size,
           "algorithm": res.algorithm, "chunks": res.chunks, "time_s": res.time_s,
           "algbw_bytes_per_s": res.algbw, "busbw_bytes_per_s": res.busbw, "busiest_link": res.busiest_link,
           "busiest_link_busy_s": float(res.link_busy.max()) if len(res.link_busy) else 0.0,
           "link_events": int(res.events)}
    if args.json:
        print_json(out, indent=2)
    else:
        print(f"{args.op} of {nbytes:,.0f} B on {net.name} ({out['ranks']} ranks, {res.algorithm}, "
              f"{res.chunks} chunks)")
        print(f"  time_s             {res.time_s:.6g}")
        print(f"  algbw              {_gbps(res.algbw)}")
        print(f"  busbw              {_gbps(res.busbw)}")
        print(f"  busiest link       {res.busiest_link} ({out['busiest_link_busy_s']:.6g} s busy)")
    return 0


def _gbps(rate: float) -> str:
    """A bandwidth in GB/s; a collective that takes no time (one rank) has none: 'n/a', as --json's null
    (the text said 'inf GB/s')."""
    return f"{rate / 1e9:.2f} GB/s" if math.isfinite(rate) else "n/a (no time taken)"


def main(argv: list[str] | None = None) -> int:
    """The `collective` command alone (tests and scripts); the same as `rapidllm collective ...`."""
    from rapidllm.cli import main as cli_main

    return cli_main(argv)
