"""CUTLASS-style GEMM tile candidates and their per-SM occupancy on a given device.

A candidate is a CTA tile (M, N, K), a warp tile, a software-pipeline depth (stages) and the thread count
that follows from the warp layout. Its shared-memory and register footprints decide how many CTAs an SM
can hold; candidates that do not fit at all are discarded, as the RAPID-LLM paper (§4.1) describes.
Three MMA styles (`mma_style`): sm_80 `mma.sync` (per-warp fragments), sm_90 warpgroup `wgmma` and
sm_100 `tcgen05.mma` (one issuing thread, accumulators in tensor memory, optional CTA pairs). Each style
fixes the candidate's shared-memory operand rows per k-iteration (`smem_rows`), which the pricing kernel
reads as a plain column instead of branching on the style.
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

# sm_100 tcgen05 (PTX ISA, "TensorCore 5th Generation Family Instructions"; CUTLASS media/docs/cpp/
# blackwell_functionality.md, Table 4, and include/cutlass/gemm/collective/builders/sm100_umma_builder.inl at
# NVIDIA/cutlass 7107b05): the MMA tile shapes the sm100 builders offer for 16-bit and 8-bit operands, as the
# CTA's share (M rows per CTA, N columns, CTAs executing one MMA). 1SM: M 64 or 128; 2SM (cta_group::2): a
# pair M of 128 or 256, each CTA holding half of it; N 64..256 in steps of 64 in both.
TC_SHAPES: tuple[tuple[int, int, int], ...] = tuple(
    (cm, cn, g) for g in (1, 2) for cm in (64, 128) for cn in (64, 128, 192, 256))
# Tensor memory per SM: 128 lanes x 512 columns of 32 bit (PTX ISA, "Tensor Memory"; the builder's
# Sm100TmemCapacityColumns). An fp32 accumulator of cm x cn takes cm*cn/128 columns: a 64-row accumulator
# fills half the lanes, so two share a column range (the builder's "1SM MMA_M = 64" stage count).
TMEM_LANES, TMEM_COLUMNS = 128, 512
# The sm100 warp-specialized GEMM kernel (include/cutlass/gemm/kernel/sm100_gemm_tma_warpspecialized.hpp):
# a scheduler, a TMA-load, an MMA-issue and an epilogue-load warp plus 4 epilogue warps.
TC_THREADS = 256
# The epilogue warps load the accumulator from tensor memory in subtiles of 4,096 fp32 values (the sm100
# epilogue builder's EpilogueTileAuto, sm100_builder.inl: N = 4096 / M): 32 registers per epilogue thread.
TC_EPILOGUE_ELEMENTS = 4096


@dataclass(frozen=True)
class Catalog:
    """Structure of arrays, one entry per surviving candidate (all int64) — the numba kernel's input."""
    cta_m: np.ndarray            # output rows per CTA (a tcgen05 CTA pair: each CTA's half of the pair's M)
    cta_n: np.ndarray
    cta_k: np.ndarray
    warp_m: np.ndarray           # the tile one MMA issuer covers: a warp, a warpgroup, or a tcgen05 CTA's share
    warp_n: np.ndarray
    stages: np.ndarray
    cluster_m: np.ndarray        # CTAs along M sharing each B tile by TMA multicast (1 = no cluster)
    cta_group: np.ndarray        # CTAs executing one MMA (2: tcgen05 cta_group::2 pair, else 1)
    smem_rows: np.ndarray        # operand rows of cta_k elements written to + read from shared memory per k-iteration
    tmem_cols: np.ndarray        # tensor-memory columns of the CTA's fp32 accumulator (0: accumulators in registers)
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


# Column order of a candidate row before the SM-limit filter (Catalog's fields minus occupancy).
_COLUMNS = ("cta_m", "cta_n", "cta_k", "warp_m", "warp_n", "stages", "cluster_m", "cta_group", "smem_rows",
            "tmem_cols", "threads", "regs", "smem")
_COL = {name: j for j, name in enumerate(_COLUMNS)}


def _operand_rows(element_bytes: float) -> list[int]:
    """CTA K depths (elements) for CTA_K_BYTES of packed operand row."""
    return [int(kb / element_bytes) for kb in CTA_K_BYTES]


def _smem_bytes(stages: int, rows_per_stage: float, ck: int, in_bytes: float) -> int:
    """A CTA's shared memory: `stages` buffers of `rows_per_stage` operand rows of ck elements, plus the
    runtime's reservation."""
    return math.ceil(stages * rows_per_stage * ck * in_bytes) + SMEM_RESERVED


def _legacy_candidates(in_bytes: float, element_bytes: float, warpgroup: bool) -> list[tuple[int, ...]]:
    """The sm_80 (`mma.sync`) and sm_90 (`wgmma`) candidates: CTA_SHAPES, every CTA holding its whole A and B
    tiles in each stage."""
    rows = []
    for cm, cn, wm_count, wn_count in CTA_SHAPES:
        for ck in _operand_rows(element_bytes):
            for st in STAGES:
                smem = _smem_bytes(st, cm + cn, ck, in_bytes)
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
                # every MMA group (warp or warpgroup) reads its A and B slices, the CTA writes both tiles once
                smem_rows = (cm // wm) * (cn // wn) * (wm + wn) + cm + cn
                for cl in ((1, 2) if warpgroup else (1,)):
                    rows.append((cm, cn, ck, wm, wn, st, cl, 1, smem_rows, 0, threads, regs, smem))
    return rows


def tcgen05_smem_rows(cta_m: int, cta_n: int, cta_group: int) -> int:
    """Operand rows (of the CTA's K depth) one CTA's shared memory moves per k-iteration under tcgen05.mma.

    Writes: TMA stores the CTA's A rows and its share of B once (`cta_n / cta_group` columns: a
    cta_group::2 pair splits B by N, CuTe's SM100_MMA_*_2x1SM layouts, mma_traits_sm100.hpp). Reads: the
    MMA reads A and B from shared memory once per CTA (no per-warpgroup re-reads, the accumulator is in
    tensor memory). Each CTA's share of the MMA consumes all cta_n columns of B; in a pair half of them sit in
    the peer's shared memory and are read from there (a cross-CTA read), so by symmetry every SM's shared
    memory serves its own B half twice, once to each tensor core of the pair. Whether the hardware feeds both
    tensor cores from one read is not documented; charging two is the upper bound of the two readings.
    1SM: 2 (cm + cn); pair: 2 cm + cn + cn / 2 (cta_n is a multiple of 64: the division is exact).
    """
    return 2 * cta_m + cta_n + cta_n // cta_group


def _tcgen05_candidates(in_bytes: float, element_bytes: float) -> list[tuple[int, ...]]:
    """The sm_100 candidates: TC_SHAPES (1SM and CTA-pair MMAs), TC_THREADS threads whose registers hold no
    accumulators, the accumulator in tensor memory (`tmem_cols`, an occupancy limit in `occupancy`).

    Tensor memory: each resident CTA holds one fp32 accumulator of its tile. CUTLASS's persistent sm100
    kernel instead keeps one CTA per SM with min(4, 512 / columns) accumulator stages (the builder's
    AccumulatorPipelineStageCount), so one tile's epilogue drains while the next tile's k-loop runs; the
    model spends the same 512 columns as resident CTAs (a 128x256 tile: two), whose rounds it prices as
    for every style.

    Clusters: a 1SM CTA alone or two along M multicasting B (as sm_90); a pair alone (cluster 2: each CTA
    loads its half of B, half the L2 reads of B) or two pairs along M multicasting B between them (cluster 4,
    a quarter). The kernel's L2 term `cta_n / cluster_m` covers all four. A in tensor memory (the `.kind` TS
    form) is not a candidate: a GEMM's A arrives in shared memory by TMA and reaches tensor memory by a
    tcgen05.cp that reads it from there, the same shared-memory bytes as the MMA reading it.
    """
    regs = _round_up(REG_OVERHEAD + TC_EPILOGUE_ELEMENTS // 128, REG_GRANULE)
    rows = []
    for cm, cn, g in TC_SHAPES:
        sm_rows = tcgen05_smem_rows(cm, cn, g)
        tmem_cols = cm * cn // TMEM_LANES
        for ck in _operand_rows(element_bytes):
            for st in STAGES:
                smem = _smem_bytes(st, cm + cn / g, ck, in_bytes)
                for cl in ((1, 2) if g == 1 else (2, 4)):
                    rows.append((cm, cn, ck, cm, cn, st, cl, g, sm_rows, tmem_cols, TC_THREADS, regs, smem))
    return rows


def _all_candidates(in_bytes: float, element_bytes: float, style: str) -> list[tuple[int, ...]]:
    """Every candidate of an MMA style before the SM-limit filter; columns as _COLUMNS. `in_bytes` is
    what an operand element occupies with its block scales (shared memory), `element_bytes` the packed element
    alone (the K depth): 0.5625 and 0.5 B for NVFP4, equal for the other types."""
    if style == "sm100":
        return _tcgen05_candidates(in_bytes, element_bytes)
    return _legacy_candidates(in_bytes, element_bytes, warpgroup=style == "sm90")


def mma_style(hw: HardwareSpec) -> str:
    """The device's tensor-core MMA style: "sm80" (`mma.sync`), "sm90" (warpgroup `wgmma`, operands read
    from shared memory per warpgroup) or "sm100" (`tcgen05.mma`, compute capability 10.x: B200, GB200, GB300).

    The `compute_capability` attribute decides. Without it, the tensor rates do: an NVFP4 rate marks sm_100
    (block-scaled FP4 MMAs are tcgen05-only) and an FP8 rate Hopper (A100 has neither).
    """
    if hw.compute_capability:
        cc = float(hw.compute_capability)
        return "sm100" if cc >= 10.0 else "sm90" if cc >= 9.0 else "sm80"
    if "fp4" in hw.tensor_flops:
        return "sm100"
    return "sm90" if "fp8" in hw.tensor_flops else "sm80"


def occupancy(limits: SMLimits, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray,
              tmem_cols: np.ndarray | None = None) -> np.ndarray:
    """Resident CTAs per SM (0 = does not fit) under the thread, register, shared-memory and block limits,
    and for tcgen05 candidates (`tmem_cols` > 0) the tensor-memory columns of their accumulators."""
    by_threads = limits.max_threads // threads
    by_regs = limits.max_registers // (regs * threads)
    by_smem = (np.floor(limits.max_shared_memory / smem)).astype(np.int64)
    occ = np.minimum(np.minimum(by_threads, by_regs), np.minimum(by_smem, limits.max_blocks))
    if tmem_cols is not None:
        occ = np.where(tmem_cols > 0, np.minimum(occ, TMEM_COLUMNS // np.maximum(tmem_cols, 1)), occ)
    ok = ((threads <= limits.max_threads_per_block) & (regs <= limits.max_registers_per_thread)
          & (smem <= limits.max_shared_memory_per_block))
    return np.where(ok, occ, 0).astype(np.int64)


@lru_cache(maxsize=64)
def _catalog(limits: SMLimits, in_bytes: float, element_bytes: float, style: str) -> Catalog:
    a = np.array(_all_candidates(in_bytes, element_bytes, style), dtype=np.int64)
    c = _COL
    occ = occupancy(limits, a[:, c["threads"]], a[:, c["regs"]], a[:, c["smem"]], a[:, c["tmem_cols"]])
    keep = occ > 0
    # Exact pruning: among candidates equal but for the stage count and with the same occupancy, the
    # deepest pipeline is never slower (stages only enter the price through latency hiding).
    same = [j for name, j in c.items() if name not in ("stages", "regs", "smem")]
    best: dict[tuple, int] = {}
    for i in np.flatnonzero(keep):
        key = (*a[i, same].tolist(), int(occ[i]))
        if key not in best or a[i, c["stages"]] > a[best[key], c["stages"]]:
            best[key] = i
    idx = np.array(sorted(best.values()), dtype=np.int64)
    a, occ = a[idx], occ[idx]
    cols = [np.ascontiguousarray(a[:, j]) for j in range(a.shape[1])]
    return Catalog(*cols, occupancy=np.ascontiguousarray(occ))


def build_catalog(hw: HardwareSpec, dtype: str) -> Catalog:
    """The candidates that fit on hw's SMs for operands of dtype (cached per SM limits and element size)."""
    cat = _catalog(hw.limits, DTYPE_BYTES[dtype], packed_bytes(dtype), mma_style(hw))
    if len(cat) == 0:
        raise ValueError(f"no GEMM tile candidate fits the SM limits of {hw.name}")
    return cat
