"""`rapidllm gemm`: price one GEMM on a named device (or a device file) and say what bounds it.

The flags are checked by workflow/schemas/gemm.schema.yaml (the bounds of docs/limits.md) before any work.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rapidllm.cli.common import check_flags, print_json
from rapidllm.spec.errors import SpecError
from rapidllm.spec.hardware import DTYPE_BYTES, GEMM_PRECISIONS, HardwareSpec, locked_clock
from rapidllm.spec.named import resolve_named


# A shared-memory bound caps what raising tensor_flops can gain; the key that lifts it is optional and its
# default is Volta-Hopper's, which the tile model also applies to sm_100 (docs/new-device.md).
SMEM_NOTE = ("shared-memory bound: hardware key shared_memory_bandwidth_per_sm (default 128 B/clk x clock) caps "
             "it, not tensor_flops; docs/new-device.md")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("gemm", help="price one GEMM with the tile model",
                              description="C[m,n] = A[m,k] @ B[k,n] (batch copies) on one device.")
    p.add_argument("--hardware", required=True,
                   help="name in config/hardware (e.g. h100-sxm5-80gb), or a device YAML file (path ending in .yaml)")
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_BYTES))
    p.add_argument("--clock", default=None,
                   help="locked SM clock: a frequency ('1.2 GHz') or a bare number of GHz (default: spec clock)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def price_one(hw: HardwareSpec, m: int, n: int, k: int, dtype: str, batch: int = 1) -> dict:
    """The CLI's result as a dict with stable snake_case keys in SI units."""
    from rapidllm.ops.gemm import price_gemms       # numba: loaded when a GEMM is priced, not for --help

    pr = price_gemms(hw, [batch], [m], [n], [k], dtype)
    t, flops = float(pr.time_s[0]), float(pr.flops[0])
    return {"hardware": hw.name, "batch": batch, "m": m, "n": n, "k": k, "dtype": dtype,
            "time_s": t, "flops": flops, "achieved_flops_per_s": flops / t if t > 0 else 0.0,
            "tile": pr.tile(0), "split_k": int(pr.split_k[0]), "waves": float(pr.waves[0]),
            "hbm_bytes": float(pr.hbm_bytes[0]), "l2_bytes": float(pr.l2_bytes[0]), "bound": pr.bound_name(0),
            "compute_s": float(pr.compute_s[0]), "smem_s": float(pr.smem_s[0]), "l2_s": float(pr.l2_s[0]),
            "hbm_s": float(pr.hbm_s[0])}


def _clock(text: str | None) -> str | None:
    """--clock as a frequency string: a bare number is GHz (the unit the datasheets quote)."""
    if text is None:
        return None
    try:
        float(text)
    except ValueError:
        return text
    return f"{text} GHz"


def run(args: argparse.Namespace) -> int:
    clock = _clock(args.clock)
    check_flags("gemm", {"hardware": args.hardware, "m": args.m, "n": args.n, "k": args.k, "batch": args.batch,
                         "dtype": args.dtype, "clock": clock}, "gemm")
    mapping, where = resolve_named("hardware", args.hardware, "rapidllm gemm", "--hardware", folder=Path.cwd())
    hw = HardwareSpec.from_mapping(mapping, where)
    if args.dtype in GEMM_PRECISIONS and args.dtype not in hw.tensor_flops:
        raise SpecError(f"rapidllm gemm: --dtype: {hw.name} has no {args.dtype} tensor units; allowed: "
                        f"{', '.join(sorted(hw.tensor_flops))}")
    if clock is not None:
        hw = locked_clock(hw, mapping, where, clock, "rapidllm gemm", "--clock")
    r = price_one(hw, args.m, args.n, args.k, args.dtype, args.batch)
    if args.json:
        print_json(r, sort_keys=True)
        return 0
    tl = r["tile"]
    print(f"{r['hardware']}  {args.batch}x[{args.m}x{args.k}] @ [{args.k}x{args.n}]  {args.dtype}")
    print(f"  time      {r['time_s'] * 1e6:.2f} us   ({r['achieved_flops_per_s'] / 1e12:.1f} TFLOP/s achieved)")
    pair = f" per CTA of a {2 * tl['cta_m']}x{tl['cta_n']} CTA-pair MMA" if tl["cta_group"] == 2 else ""
    print(f"  tile      {tl['cta_m']}x{tl['cta_n']}x{tl['cta_k']}{pair}, {tl['stages']} stages, "
          f"{tl['threads']} threads, {tl['occupancy']} CTA/SM, split-K {r['split_k']}, {r['waves']:.2f} waves")
    print(f"  bound     {r['bound']}  (compute {r['compute_s'] * 1e6:.2f} us, smem {r['smem_s'] * 1e6:.2f} us, "
          f"L2 {r['l2_s'] * 1e6:.2f} us, HBM {r['hbm_s'] * 1e6:.2f} us)")
    print(f"  HBM       {r['hbm_bytes'] / 1e6:.2f} MB")
    if r["bound"] == "shared_memory":
        print(f"  note      {SMEM_NOTE}")
    return 0
