"""The numba GEMM kernel against a plain-Python restatement of the tile model."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rapidllm.ops.gemm import SPLITS, kernel_params, memory_latency_s, price_gemms
from rapidllm.ops.tiles import build_catalog
from rapidllm.spec.hardware import DTYPE_BYTES, HardwareSpec, SMLimits, Utilization


def make_hw(**kw) -> HardwareSpec:
    base = dict(name="a100-like", sm_count=108, clock_hz=1.41e9,
                tensor_flops={"bf16": 312e12, "fp16": 312e12, "tf32": 156e12}, vector_flops=19.5e12,
                hbm_capacity=80e9, hbm_bandwidth=2.039e12, l2_size=40 * 2**20, l2_bandwidth=5.1e12,
                smem_bandwidth_per_sm=128 * 1.41e9,
                limits=SMLimits(2048, 1024, 65536, 255, 164 * 1024, 163 * 1024, 32),
                launch_overhead_s=4e-6, framework_memory=0.0, utilization=Utilization())
    base.update(kw)
    return HardwareSpec(**base)


def reference(hw: HardwareSpec, B: int, M: int, N: int, K: int, dtype: str,
              accumulate: bool = False, only: int | None = None) -> tuple[float, int, int]:
    """Best (time, candidate, split) by walking the catalog in plain Python, equations restated;
    `accumulate`: D = C + A @ B with FP32 C read from HBM before the add and FP32 D written; `only`: that
    candidate alone."""
    cat = build_catalog(hw, dtype)
    sms = hw.sm_count
    peak = hw.peak_flops(dtype) * hw.utilization.compute / sms
    hbm_bw = hw.hbm_bandwidth * hw.utilization.hbm
    lat = memory_latency_s(hw)
    ib = DTYPE_BYTES[dtype]
    ob = 4 if accumulate else DTYPE_BYTES["bf16" if dtype in ("fp8", "fp4") else dtype]
    src = 4 if accumulate else 0
    foot = (M * K + K * N) * ib
    spill = 0.0 if foot <= hw.l2_size else 1.0 - hw.l2_size / foot
    best = (math.inf, -1, -1)
    for c in range(len(cat)) if only is None else [only]:
        d = cat.describe(c)
        cm, cn, ck, o, cl = d["cta_m"], d["cta_n"], d["cta_k"], d["occupancy"], d["cluster_m"]
        tm = math.ceil(math.ceil(M / cm) / cl) * cl
        tn = math.ceil(N / cn)
        base = B * tm * tn
        kit_all = math.ceil(K / ck)
        warps = (cm // d["warp_m"]) * (cn // d["warp_n"])
        fl_it = 2.0 * cm * cn * ck
        # every MMA issuer (warp, warpgroup, tcgen05 CTA share) reads its A and B slices; TMA or the threads
        # write A and the CTA's share of B (a tcgen05 pair splits B by N)
        sm_it = (warps * (d["warp_m"] + d["warp_n"]) + cm + cn / d["cta_group"]) * ck * ib
        for sk in SPLITS:
            sk = int(sk)
            if sk > 1 and (base * sk > sms * o or sk > kit_all):
                break
            kit = math.ceil(kit_all / sk)
            tiles = base * sk
            per_sm = math.ceil(tiles / sms)
            epi = cm * cn * (ob if sk == 1 else 4) * min(tiles, sms) / hw.l2_bandwidth
            epi += cm * cn * src * min(tiles, sms) / hbm_bw if sk == 1 else 0.0

            def rnd(cc):
                return 2 * lat + kit * max(cc * fl_it / peak, cc * sm_it / hw.smem_bandwidth_per_sm,
                                           lat / (d["stages"] - 1)) + cc * epi
            sm_time = (per_sm // o) * rnd(o) + (rnd(per_sm % o) if per_sm % o else 0.0)
            l2 = tiles * (cm + cn / cl) * kit * ck * ib + B * M * N * (ob + src)
            partial = 2.0 * B * M * N * sk * 4 if sk > 1 else 0.0
            l2 += partial
            wt = max(1, min(tiles, sms * o) // sk)
            wr = min(tm, math.ceil(math.sqrt(wt)))
            wc = min(tn, math.ceil(wt / wr))
            reads = math.ceil(base / wt) * (wr * cm + wc * cn) * K * ib
            comp = B * foot
            hbm = (comp + max(0.0, reads - comp) * spill + B * M * N * (ob + src)
                   + (partial if partial > hw.l2_size else 0))
            t = hw.launch_overhead_s + max(sm_time, l2 / hw.l2_bandwidth, hbm / hbm_bw) + (lat if sk > 1 else 0)
            if t < best[0]:
                best = (t, c, sk)
    return best


SHAPES = [(1, 4096, 4096, 4096), (1, 16384, 1, 4096), (1, 1, 8192, 8192), (4, 256, 512, 2048),
          (1, 1024, 128, 1024), (2, 777, 1234, 333), (1, 16384, 12288, 4096)]


def test_kernel_matches_reference_on_known_shapes():
    hw = make_hw()
    for dtype in ("bf16", "tf32"):
        pr = price_gemms(hw, *zip(*SHAPES), dtype)
        for i, (B, M, N, K) in enumerate(SHAPES):
            t, c, sk = reference(hw, B, M, N, K, dtype)
            assert math.isclose(pr.time_s[i], t, rel_tol=1e-12)
            assert (pr.candidate[i], pr.split_k[i]) == (c, sk)


def hopper_like(**kw) -> HardwareSpec:
    return make_hw(name="h100-like", sm_count=132, clock_hz=1.83e9, tensor_flops={"bf16": 989e12, "fp8": 1979e12},
                   hbm_bandwidth=3.35e12, l2_size=50 * 2**20, l2_bandwidth=8.4e12, smem_bandwidth_per_sm=128 * 1.83e9,
                   limits=SMLimits(2048, 1024, 65536, 255, 228 * 1024, 227 * 1024, 32), **kw)


def test_kernel_matches_reference_on_hopper_like_device():
    hw = hopper_like()
    for dtype, accumulate in (("bf16", False), ("fp8", False), ("fp8", True)):
        pr = price_gemms(hw, *zip(*SHAPES), dtype, accumulate)
        for i, s in enumerate(SHAPES):
            t, c, sk = reference(hw, *s, dtype, accumulate)
            assert math.isclose(pr.time_s[i], t, rel_tol=1e-12) and pr.candidate[i] == c and pr.split_k[i] == sk


def blackwell_like(**kw) -> HardwareSpec:
    return make_hw(name="b200-like", sm_count=148, clock_hz=1.965e9,
                   tensor_flops={"bf16": 2250e12, "fp8": 4500e12, "fp4": 9000e12}, hbm_bandwidth=8e12,
                   l2_size=126 * 2**20, l2_bandwidth=20e12, smem_bandwidth_per_sm=128 * 1.965e9,
                   limits=SMLimits(2048, 1024, 65536, 255, 228 * 1024, 227 * 1024, 32), compute_capability="10.0",
                   **kw)


def test_kernel_matches_reference_for_fp4_on_blackwell_like_device():
    """NVFP4 operands: the stored 0.5625 B per element (E2M1 + an E4M3 scale per 16) in every byte term,
    the K depth in packed 4-bit elements (128 and 256 per CTA), the fp4 rate, BF16 output."""
    hw = blackwell_like()
    assert sorted(set(build_catalog(hw, "fp4").cta_k.tolist())) == [128, 256]
    pr = price_gemms(hw, *zip(*SHAPES), "fp4")
    for i, s in enumerate(SHAPES):
        t, c, sk = reference(hw, *s, "fp4")
        assert math.isclose(pr.time_s[i], t, rel_tol=1e-12) and pr.candidate[i] == c and pr.split_k[i] == sk


def test_kernel_matches_reference_for_tcgen05_on_blackwell_like_device():
    """The tcgen05 style (compute capability 10.0): 1SM and CTA-pair candidates, accumulators in tensor
    memory; the winners of the known shapes include a pair (cta_group 2), so the pair's shared-memory rows
    are exercised, at the datasheet peak and at the H100-transferred utilizations."""
    for hw in (blackwell_like(), blackwell_like(utilization=Utilization(compute=0.685, hbm=0.711))):
        for dtype, accumulate in (("bf16", False), ("fp8", False), ("fp8", True)):
            pr = price_gemms(hw, *zip(*SHAPES), dtype, accumulate)
            for i, s in enumerate(SHAPES):
                t, c, sk = reference(hw, *s, dtype, accumulate)
                assert math.isclose(pr.time_s[i], t, rel_tol=1e-12) and pr.candidate[i] == c and pr.split_k[i] == sk
    assert 2 in {pr.tile(i)["cta_group"] for i in range(len(SHAPES))}


def test_accumulating_epilogue_adds_the_fp32_read_per_round():
    """D = C + A @ B (blockwise-FP8 wgrad into the FP32 main gradient): with the tile, split and occupancy
    held, each round of co-resident CTAs waits for its FP32 C tiles from HBM and stores FP32 D: per round
    conc x (cm cn x 4 B x active / HBM bandwidth + cm cn x 2 B x active / L2 bandwidth) more than the
    BF16-output GEMM. A compute-bound 16384 x 7168 x 4096 wgrad (DeepSeek-V3's o_proj) on 132 SMs at the
    H800's utilizations."""
    hw = hopper_like(utilization=Utilization(compute=0.694, hbm=0.711))
    plain, acc = (price_gemms(hw, [1], [16384], [7168], [4096], "fp8", a) for a in (False, True))
    assert acc.split_k[0] == 1 and acc.bound_name(0) == plain.bound_name(0) == "compute"
    same_tile, _, _ = reference(hw, 1, 16384, 7168, 4096, "fp8", only=int(acc.candidate[0]))
    d = acc.tile(0)
    cm, cn, o = d["cta_m"], d["cta_n"], int(acc.occupancy[0])
    tiles = math.ceil(16384 / cm / d["cluster_m"]) * d["cluster_m"] * math.ceil(7168 / cn)
    per_sm = math.ceil(tiles / 132)
    rounds = [o] * (per_sm // o) + ([per_sm % o] if per_sm % o else [])
    extra = sum(c * cm * cn * 132 * (4 / (3.35e12 * hw.utilization.hbm) + 2 / 8.4e12) for c in rounds)
    assert math.isclose(acc.time_s[0] - same_tile, extra, rel_tol=1e-9)
    assert 1.2 < acc.time_s[0] / plain.time_s[0] < 1.4


dims = st.integers(min_value=1, max_value=20000)


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 8), m=dims, n=dims, k=dims)
def test_kernel_matches_reference_on_random_shapes(b, m, n, k):
    hw = make_hw()
    pr = price_gemms(hw, [b], [m], [n], [k], "bf16")
    t, c, sk = reference(hw, b, m, n, k, "bf16")
    assert math.isclose(pr.time_s[0], t, rel_tol=1e-12)


def test_kernel_params_apply_utilization():
    hw = make_hw(utilization=Utilization(compute=0.5, hbm=0.25))
    p = kernel_params(hw, "bf16")
    assert math.isclose(p[1], 312e12 * 0.5 / 108) and math.isclose(p[5], 2.039e12 * 0.25)
    assert np.all(build_catalog(hw, "bf16").occupancy >= 1)
