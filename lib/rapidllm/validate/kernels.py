"""GEMM operator model against measured kernels (RAPID-LLM Fig 10): A100 Nsight Compute and H100 XLA sets.

Each reference row becomes a (device, batch, m, n, k, dtype, measured seconds) case; the tile model and the
plain roofline price it, and we report MAPE both plain (every kernel counts once) and time-weighted
(sum |pred - meas| / sum meas, the paper's Fig 10 metric, which is dominated by the long kernels).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from rapidllm.ops.gemm import price_gemms, roofline_gemm_time
from rapidllm.spec.hardware import HardwareSpec, Utilization
from rapidllm.spec.named import resolve_named
from rapidllm.spec.paths import project_root

# The RAPID-LLM paper's calibrated constants (§5, "three calibrated constants shared across all cases"):
# compute 100 % (A100) / 85 % (H100), HBM 80 %. Published values, not fitted here.
PAPER_UTILIZATION = {"a100-sxm4-80gb": Utilization(compute=1.0, hbm=0.8, network=0.8),
                     "h100-sxm5-80gb": Utilization(compute=0.85, hbm=0.8, network=0.8)}
XLA_DTYPES = {"bf16xbf16->bf16": "bf16", "f32xf32->f32": "tf32"}   # f32 rows ran on TF32 tensor cores
SETS = {"a100_ncu": ("gemm_ncu_a100.csv", "a100-sxm4-80gb"), "h100_xla": ("gemm_xla_h100.csv", "h100-sxm5-80gb")}


def references_dir() -> Path:
    return project_root() / "validation" / "references"


UTILIZATION_MODES = ("datasheet", "spec", "paper")


def load_hardware(name: str, utilization: str = "datasheet") -> HardwareSpec:
    """A device from config/hardware. Utilization 'datasheet' (1.0: the operator model from the spec
    alone, the default), 'spec' (the end-to-end calibrated constants in the file), 'paper' (the paper's)."""
    mapping, where = resolve_named("hardware", name, "validate", "hardware")
    hw = HardwareSpec.from_mapping(mapping, where)
    if utilization == "paper":
        return replace(hw, utilization=PAPER_UTILIZATION[name])
    if utilization == "datasheet":
        return replace(hw, utilization=Utilization())
    if utilization != "spec":
        raise ValueError(f"utilization must be one of {', '.join(UTILIZATION_MODES)}, not {utilization!r}")
    return hw


def load_cases(set_name: str, path: Path | None = None) -> pd.DataFrame:
    """Reference rows as cases: columns batch, m, n, k, dtype, clock_hz (NaN = unlocked), measured_s."""
    fname, _ = SETS[set_name]
    df = pd.read_csv(path or references_dir() / fname)
    if set_name == "a100_ncu":
        # The NCU set is a half-precision (16-bit) Llama forward pass; bf16 and fp16 cost the same.
        return pd.DataFrame({"batch": 1, "m": df.m, "n": df.n, "k": df.k, "dtype": "bf16",
                             "clock_hz": df.clock_Ghz * 1e9, "measured_s": df.latency_ms * 1e-3})
    dt = df.dtype.map(lambda s: XLA_DTYPES.get(s, "fp8" if s.startswith("f8") else None))
    return pd.DataFrame({"batch": df.batch, "m": df.m, "n": df.n, "k": df.k, "dtype": dt, "variant": df.dtype,
                         "clock_hz": np.nan, "measured_s": df.implied_time_us * 1e-6})


def predict(cases: pd.DataFrame, hw: HardwareSpec) -> pd.DataFrame:
    """Add tile-model and roofline predictions (seconds), the chosen tile and the bound to the cases."""
    out = cases.copy()
    for col in ("tile_s", "roofline_s"):
        out[col] = np.nan
    out["tile"], out["split_k"], out["bound"] = "", 1, ""
    keys = [out.dtype, out.clock_hz.fillna(0.0)]
    for (dtype, clock), idx in out.groupby(keys).groups.items():
        dev = hw.at_clock(clock) if clock > 0 else hw
        g = out.loc[idx]
        pr = price_gemms(dev, g.batch.values, g.m.values, g.n.values, g.k.values, dtype)
        out.loc[idx, "tile_s"] = pr.time_s
        out.loc[idx, "roofline_s"] = roofline_gemm_time(dev, g.m.values, g.n.values, g.k.values, dtype,
                                                        g.batch.values)
        out.loc[idx, "split_k"] = pr.split_k
        out.loc[idx, "bound"] = [pr.bound_name(i) for i in range(len(g))]
        out.loc[idx, "tile"] = ["{cta_m}x{cta_n}x{cta_k}/s{stages}".format(**pr.tile(i)) for i in range(len(g))]
    return out


@dataclass(frozen=True)
class Errors:
    """MAPE of one prediction column against the measurement: plain and time-weighted, as fractions."""
    n: int
    mape: float
    mape_time_weighted: float
    signed_bias: float             # sum(pred - meas) / sum(meas): negative = model too fast overall


def errors(pred: np.ndarray, meas: np.ndarray) -> Errors:
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    ae = np.abs(pred - meas)
    return Errors(n=len(meas), mape=float(np.mean(ae / meas)), mape_time_weighted=float(ae.sum() / meas.sum()),
                  signed_bias=float((pred - meas).sum() / meas.sum()))


def validate_set(set_name: str, utilization: str = "datasheet") -> tuple[pd.DataFrame, dict[str, dict[str, Errors]]]:
    """Predictions for one reference set plus errors per dtype for the tile model and the roofline."""
    _, device = SETS[set_name]
    hw = load_hardware(device, utilization)
    df = predict(load_cases(set_name), hw)
    report = {}
    for dtype, g in df.groupby("dtype"):
        report[dtype] = {"tile": errors(g.tile_s, g.measured_s), "roofline": errors(g.roofline_s, g.measured_s)}
    return df, report


def summary(utilization: str = "datasheet") -> pd.DataFrame:
    """One row per (set, dtype, model): n, MAPE, time-weighted MAPE, bias — the Fig 10 table."""
    rows = []
    for set_name in SETS:
        _, rep = validate_set(set_name, utilization)
        for dtype, models in rep.items():
            for model, e in models.items():
                rows.append({"set": set_name, "dtype": dtype, "model": model, "n": e.n, "mape": e.mape,
                             "mape_time_weighted": e.mape_time_weighted, "bias": e.signed_bias})
    return pd.DataFrame(rows)


if __name__ == "__main__":   # quick look: python -m rapidllm.validate.kernels
    for u in UTILIZATION_MODES:
        print(f"utilization={u}")
        print(summary(u).to_string(index=False, float_format=lambda x: f"{x:.4f}"))
