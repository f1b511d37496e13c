"""GEMM pricing: the extended-roofline tile model (RAPID-LLM §4.1) and the plain roofline baseline.

`price_gemms` prices many shapes at once through one numba kernel (ops/gemm_kernel.py) over the
candidate catalog of ops/tiles.py, so the efficiency of a GEMM changes with its shape the way it does on a
GPU: tile quantization, the partly empty last wave, pipeline latency on short K loops, L2/HBM traffic.
`roofline_gemm_time` is the shape-blind baseline kept for the Fig 10 ablation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rapidllm.ops import gemm_kernel as gk
from rapidllm.ops.tiles import Catalog, build_catalog
from rapidllm.spec.hardware import DTYPE_BYTES, GEMM_PRECISIONS, HardwareSpec

# Global-memory load latency in SM cycles (pointer-chase figures for Ampere/Hopper HBM under load are
# ~500-900 cycles; Jia et al. 2018/2021, Luo et al. 2024). Used only until HardwareSpec carries a
# `memory_latency_s` field; one constant for every device and case, never fitted.
MEMORY_LATENCY_CYCLES = 700.0
ACC_BYTES = 4.0                            # fp32 accumulators / split-K partials
SPLITS = np.array([1, 2, 3, 4, 6, 8, 12, 16], dtype=np.int64)


def output_dtype(dtype: str) -> str:
    """What the GEMM writes: fp8 and fp4 GEMMs emit bf16 (cuBLASLt/XLA convention; TensorRT-LLM's
    nvfp4_gemm and CUTLASS's sm100 NVFP4 GEMMs write BF16 D), others their input type."""
    return "bf16" if dtype in GEMM_PRECISIONS else dtype


def memory_latency_s(hw: HardwareSpec) -> float:
    """Global-memory latency: the spec's value if it has one, else MEMORY_LATENCY_CYCLES at its clock."""
    return float(hw.memory_latency_s or MEMORY_LATENCY_CYCLES / hw.clock_hz)


@dataclass(frozen=True)
class GemmPrices:
    """Per-shape results (numpy arrays, one entry per shape) and the catalog the indices refer to."""
    time_s: np.ndarray
    compute_s: np.ndarray
    smem_s: np.ndarray
    l2_s: np.ndarray
    hbm_s: np.ndarray
    hbm_bytes: np.ndarray
    l2_bytes: np.ndarray
    flops: np.ndarray
    candidate: np.ndarray
    split_k: np.ndarray
    waves: np.ndarray
    occupancy: np.ndarray
    bound: np.ndarray                      # index into BOUND_NAMES
    catalog: Catalog

    def bound_name(self, i: int) -> str:
        return gk.BOUND_NAMES[int(self.bound[i])]

    def tile(self, i: int) -> dict[str, int]:
        return self.catalog.describe(int(self.candidate[i]))


def kernel_params(hw: HardwareSpec, dtype: str, accumulate: bool = False) -> np.ndarray:
    """The device and dtype as the kernel's float64 parameter vector (utilizations applied here).

    `accumulate`: the GEMM adds its product into an FP32 matrix in HBM (D = C + A @ B, C and D FP32), as
    the weight-gradient GEMMs of fine-grained (blockwise) FP8 training do into the FP32 main gradient
    (docs/fp8.md): the epilogue reads C (4 B per element) and writes D in FP32 (4 B)."""
    p = np.zeros(gk.N_PARAMS)
    p[gk.P_SMS] = hw.sm_count
    p[gk.P_SM_PEAK] = hw.peak_flops(dtype) * hw.utilization.compute / hw.sm_count
    p[gk.P_SMEM_BW] = hw.smem_bandwidth_per_sm
    p[gk.P_L2_BW] = hw.l2_bandwidth
    p[gk.P_L2_SIZE] = hw.l2_size
    p[gk.P_HBM_BW] = hw.hbm_bandwidth * hw.utilization.hbm
    p[gk.P_LAUNCH] = hw.launch_overhead_s
    p[gk.P_LAT] = memory_latency_s(hw)
    p[gk.P_IN] = DTYPE_BYTES[dtype]        # stored size, block scales included (0.5625 B for NVFP4)
    p[gk.P_OUT] = ACC_BYTES if accumulate else DTYPE_BYTES[output_dtype(dtype)]
    p[gk.P_ACC] = ACC_BYTES
    p[gk.P_SRC] = ACC_BYTES if accumulate else 0.0
    return p


def _as_i64(x, size: int) -> np.ndarray:
    a = np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=np.int64), (size,)))
    if np.any(a < 0):
        raise ValueError("GEMM dimensions must be >= 0")
    return a


def price_gemms(hw: HardwareSpec, batch, m, n, k, dtype: str, accumulate: bool = False) -> GemmPrices:
    """Price every (batch, m, n, k) GEMM (C[m,n] = A[m,k] @ B[k,n], `batch` independent copies);
    `accumulate`: into an FP32 matrix in HBM (`kernel_params`)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    size = int(np.broadcast(np.asarray(batch), np.asarray(m), np.asarray(n), np.asarray(k)).size)
    b_, m_, n_, k_ = (_as_i64(x, size) for x in (batch, m, n, k))
    cat = build_catalog(hw, dtype)
    fout, iout = gk.price_kernel(b_, m_, n_, k_, cat.cta_m, cat.cta_n, cat.cta_k, cat.smem_rows, cat.stages,
                                 cat.cluster_m, cat.occupancy, SPLITS, kernel_params(hw, dtype, accumulate))
    return GemmPrices(
        time_s=fout[:, gk.F_TIME], compute_s=fout[:, gk.F_COMPUTE], smem_s=fout[:, gk.F_SMEM],
        l2_s=fout[:, gk.F_L2], hbm_s=fout[:, gk.F_HBM], hbm_bytes=fout[:, gk.F_HBM_BYTES],
        l2_bytes=fout[:, gk.F_L2_BYTES], flops=fout[:, gk.F_FLOPS], candidate=iout[:, gk.I_CAND],
        split_k=iout[:, gk.I_SPLIT], waves=fout[:, gk.F_WAVES], occupancy=iout[:, gk.I_OCC],
        bound=iout[:, gk.I_BOUND], catalog=cat)


def gemm_time(hw: HardwareSpec, m: int, n: int, k: int, dtype: str, batch: int = 1) -> float:
    """Seconds for one GEMM under the tile model."""
    return float(price_gemms(hw, [batch], [m], [n], [k], dtype).time_s[0])


def roofline_gemm_time(hw: HardwareSpec, m, n, k, dtype: str, batch=1) -> np.ndarray | float:
    """Plain roofline: launch + max(FLOPs / peak, compulsory bytes / HBM bandwidth); shape-blind."""
    b, m, n, k = (np.asarray(x, dtype=np.float64) for x in (batch, m, n, k))
    flops = 2.0 * b * m * n * k
    byts = b * ((m * k + k * n) * DTYPE_BYTES[dtype] + m * n * DTYPE_BYTES[output_dtype(dtype)])
    t = hw.launch_overhead_s + np.maximum(flops / (hw.peak_flops(dtype) * hw.utilization.compute),
                                          byts / (hw.hbm_bandwidth * hw.utilization.hbm))
    return float(t) if t.ndim == 0 else t
