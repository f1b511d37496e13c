"""`rapidllm gemm`: price one GEMM on a named device and say what bounds it (wired into cli.py by the lead)."""
from __future__ import annotations

import argparse
import json

from rapidllm.ops.gemm import price_gemms
from rapidllm.spec.hardware import DTYPE_BYTES, HardwareSpec
from rapidllm.spec.named import resolve_named


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("gemm", help="price one GEMM with the tile model",
                              description="C[m,n] = A[m,k] @ B[k,n] (batch copies) on one device.")
    p.add_argument("--hardware", required=True, help="name in config/hardware (e.g. h100-sxm5-80gb)")
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_BYTES))
    p.add_argument("--clock", type=float, default=None, help="locked SM clock in GHz (default: spec clock)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def price_one(hw: HardwareSpec, m: int, n: int, k: int, dtype: str, batch: int = 1) -> dict:
    """The CLI's result as a dict with stable snake_case keys in SI units."""
    pr = price_gemms(hw, [batch], [m], [n], [k], dtype)
    t, flops = float(pr.time_s[0]), float(pr.flops[0])
    return {"hardware": hw.name, "batch": batch, "m": m, "n": n, "k": k, "dtype": dtype,
            "time_s": t, "flops": flops, "achieved_flops_per_s": flops / t if t > 0 else 0.0,
            "tile": pr.tile(0), "split_k": int(pr.split_k[0]), "waves": float(pr.waves[0]),
            "hbm_bytes": float(pr.hbm_bytes[0]), "l2_bytes": float(pr.l2_bytes[0]), "bound": pr.bound_name(0),
            "compute_s": float(pr.compute_s[0]), "smem_s": float(pr.smem_s[0]), "l2_s": float(pr.l2_s[0]),
            "hbm_s": float(pr.hbm_s[0])}


def run(args: argparse.Namespace) -> int:
    for name in ("m", "n", "k", "batch"):
        if getattr(args, name) < 1:
            raise SystemExit(f"rapidllm gemm: --{name} must be >= 1")
    mapping, where = resolve_named("hardware", args.hardware, "rapidllm gemm", "--hardware")
    hw = HardwareSpec.from_mapping(mapping, where)
    if args.clock:
        hw = hw.at_clock(args.clock * 1e9)
    r = price_one(hw, args.m, args.n, args.k, args.dtype, args.batch)
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return 0
    tl = r["tile"]
    print(f"{r['hardware']}  {args.batch}x[{args.m}x{args.k}] @ [{args.k}x{args.n}]  {args.dtype}")
    print(f"  time      {r['time_s'] * 1e6:.2f} us   ({r['achieved_flops_per_s'] / 1e12:.1f} TFLOP/s achieved)")
    print(f"  tile      {tl['cta_m']}x{tl['cta_n']}x{tl['cta_k']}, {tl['stages']} stages, {tl['threads']} threads, "
          f"{tl['occupancy']} CTA/SM, split-K {r['split_k']}, {r['waves']:.2f} waves")
    print(f"  bound     {r['bound']}  (compute {r['compute_s'] * 1e6:.2f} us, smem {r['smem_s'] * 1e6:.2f} us, "
          f"L2 {r['l2_s'] * 1e6:.2f} us, HBM {r['hbm_s'] * 1e6:.2f} us)")
    print(f"  HBM       {r['hbm_bytes'] / 1e6:.2f} MB")
    return 0
