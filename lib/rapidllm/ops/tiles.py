"""CUTLASS-style GEMM tile candidates and their per-SM occupancy on a given device.

A candidate is a CTA tile (M, N, K), a warp tile, a software-pipeline depth (stages) and the thread count
that follows from the warp layout. Its shared-memory and register footprints decide how many CTAs an SM
can hold; candidates that do not fit at all are discarded, as the RAPID-LLM paper (§4.1) describes.
The catalog is deliberately small (tens of entries) because the pricing kernel visits every
(shape, candidate) pair and must price >= 100k shapes per second.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from rapidllm.spec.hardware import DTYPE_BYTES, HardwareSpec, SMLimits, packed_bytes

# CTA tiles (M, N) and the warp grid that covers them: 4 warps up to 128x128, 8 warps for 256-wide tiles,
# the layouts CUTLASS's default GEMM configurations use on Ampere and Hopper.
CTA_SHAPES: tuple[tuple[int, int, int, int], ...] = (
    # cta_m, cta_n, warps_m, warps_n
    (64, 64, 2, 2), (64, 128, 2, 2), (128, 64, 2, 2), (128, 128, 2, 2),
    (64, 256, 1, 4), (256, 64, 4, 1), (128, 256, 2, 4), (256, 128, 4, 2),
)
# CTA K depth in bytes of one packed operand row: 64 B and 128 B (32/64 bf16 elements, 64/128 fp8, 128/256
# fp4, 16/32 fp32). Block scales are not counted in it: they sit in tensors of their own (CUTLASS sm100
# block-scaled GEMMs load them beside A and B), but they take shared memory and bandwidth with the operands.
CTA_K_BYTES: tuple[int, ...] = (64, 128)
STAGES: tuple[int, ...] = (2, 3, 4, 5, 6)
# Registers per thread besides accumulators and operand fragments: addresses, loop counters, predicates.
REG_OVERHEAD = 32
REG_GRANULE = 8          # registers are allocated per thread in multiples of 8
SMEM_RESERVED = 1024     # bytes the runtime reserves per CTA (sm_80+)
WG_PRODUCER_REGS = 40    # registers per thread left to the TMA producer warpgroup (setmaxnreg)


@dataclass(frozen=True)
class Catalog:
    """Structure of arrays, one entry per surviving candidate (all int64) — the numba kernel's input."""
    cta_m: np.ndarray
    cta_n: np.ndarray
    cta_k: np.ndarray
    warp_m: np.ndarray
    warp_n: np.ndarray
    stages: np.ndarray
    cluster_m: np.ndarray        # CTAs along M sharing each B tile by TMA multicast (1 = no cluster)
    threads: np.ndarray
    regs: np.ndarray
    smem: np.ndarray
    occupancy: np.ndarray

    def __len__(self) -> int:
        return int(self.cta_m.shape[0])

    def describe(self, i: int) -> dict[str, int]:
        """One candidate as a plain dict (for the CLI and reports)."""
        return {f: int(getattr(self, f)[i]) for f in self.__dataclass_fields__}


def _round_up(x: int, g: int) -> int:
    return -(-x // g) * g


def _all_candidates(in_bytes: float, element_bytes: float, warpgroup: bool) -> list[tuple[int, ...]]:
    """Every candidate before the SM-limit filter; columns as in Catalog (minus occupancy). `in_bytes` is
    what an operand element occupies with its block scales (shared memory), `element_bytes` the packed element
    alone (the K depth): 0.5625 and 0.5 B for NVFP4, equal for the other types."""
    rows = []
    for cm, cn, wm_count, wn_count in CTA_SHAPES:
        for kb in CTA_K_BYTES:
            ck = int(kb / element_bytes)
            for st in STAGES:
                smem = math.ceil(st * (cm + cn) * ck * in_bytes) + SMEM_RESERVED
                if warpgroup:
                    # sm_90 wgmma: 1-2 consumer warpgroups (split along M) read A and B straight from
                    # shared memory, once per warpgroup; one producer warpgroup issues TMA loads, optionally
                    # multicasting B to a cluster of 2 CTAs along M (halves its L2 reads).
                    groups = 1 if cm == 64 else 2
                    wm, wn = cm // groups, cn
                    consumer = wm * wn // 128 + REG_OVERHEAD
                    if consumer > 255:
                        continue
                    threads = 128 * (groups + 1)
                    regs = _round_up(-(-(groups * consumer + WG_PRODUCER_REGS) // (groups + 1)), REG_GRANULE)
                else:
                    # sm_80 mma.sync: every warp loads its A and B fragments from shared memory.
                    wm, wn = cm // wm_count, cn // wn_count
                    threads = 32 * wm_count * wn_count
                    # fp32 accumulators + one k16 slice of A and B fragments per thread (32-bit registers).
                    regs = _round_up(wm * wn // 32 + (wm + wn) * 16 * in_bytes // (4 * 32) + REG_OVERHEAD,
                                     REG_GRANULE)
                for cl in ((1, 2) if warpgroup else (1,)):
                    rows.append((cm, cn, ck, wm, wn, st, cl, threads, regs, smem))
    return rows


def uses_warpgroup_mma(hw: HardwareSpec) -> bool:
    """Whether the device has sm_90-style warpgroup MMA (operands read from shared memory per warpgroup).

    HardwareSpec has no architecture field yet; an FP8 tensor rate marks Hopper and later among the
    devices in config/hardware (A100 has none). A `compute_capability` attribute wins when present.
    """
    if hw.compute_capability:
        return float(hw.compute_capability) >= 9.0
    return "fp8" in hw.tensor_flops


def occupancy(limits: SMLimits, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray) -> np.ndarray:
    """Resident CTAs per SM (0 = does not fit) under the thread, register, shared-memory and block limits."""
    by_threads = limits.max_threads // threads
    by_regs = limits.max_registers // (regs * threads)
    by_smem = (np.floor(limits.max_shared_memory / smem)).astype(np.int64)
    occ = np.minimum(np.minimum(by_threads, by_regs), np.minimum(by_smem, limits.max_blocks))
    ok = ((threads <= limits.max_threads_per_block) & (regs <= limits.max_registers_per_thread)
          & (smem <= limits.max_shared_memory_per_block))
    return np.where(ok, occ, 0).astype(np.int64)


@lru_cache(maxsize=64)
def _catalog(limits: SMLimits, in_bytes: float, element_bytes: float, warpgroup: bool) -> Catalog:
    a = np.array(_all_candidates(in_bytes, element_bytes, warpgroup), dtype=np.int64)
    occ = occupancy(limits, a[:, 7], a[:, 8], a[:, 9])
    keep = occ > 0
    # Exact pruning: among candidates equal but for the stage count and with the same occupancy, the
    # deepest pipeline is never slower (stages only enter the price through latency hiding).
    best: dict[tuple, int] = {}
    for i in np.flatnonzero(keep):
        key = (*a[i, [0, 1, 2, 3, 4, 6, 7]].tolist(), int(occ[i]))
        if key not in best or a[i, 5] > a[best[key], 5]:
            best[key] = i
    idx = np.array(sorted(best.values()), dtype=np.int64)
    a, occ = a[idx], occ[idx]
    cols = [np.ascontiguousarray(a[:, j]) for j in range(a.shape[1])]
    return Catalog(*cols, occupancy=np.ascontiguousarray(occ))


def build_catalog(hw: HardwareSpec, dtype: str) -> Catalog:
    """The candidates that fit on hw's SMs for operands of dtype (cached per SM limits and element size)."""
    cat = _catalog(hw.limits, DTYPE_BYTES[dtype], packed_bytes(dtype), uses_warpgroup_mma(hw))
    if len(cat) == 0:
        raise ValueError(f"no GEMM tile candidate fits the SM limits of {hw.name}")
    return cat
