"""Roofline pricing: time = max(FLOPs / (peak x u_compute), bytes / (HBM x u_hbm)) + launch overhead.

This is the baseline of the paper's GEMM ablation (Fig 10) and the price of every pointwise operator:
GEMMs and attention use the tensor rate of the case precision, pointwise kernels the FP32 vector rate.
"""
from __future__ import annotations

import numpy as np

from rapidllm.ops.operators import POINTWISE, Operator
from rapidllm.spec.hardware import HardwareSpec


def roofline_times(hw: HardwareSpec, ops: list[Operator], dtype: str) -> np.ndarray:
    """Seconds per launch for each operator."""
    flops = np.array([o.flops for o in ops], dtype=np.float64)
    nbytes = np.array([o.bytes for o in ops], dtype=np.float64)
    pointwise = np.array([o.kind == POINTWISE for o in ops])
    rate = np.where(pointwise, hw.vector_flops, hw.peak_flops(dtype)) * hw.utilization.compute
    bandwidth = hw.hbm_bandwidth * hw.utilization.hbm
    return np.maximum(flops / rate, nbytes / bandwidth) + hw.launch_overhead_s
