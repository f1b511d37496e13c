"""The sm_100 `tcgen05` style of the GEMM tile model (ops/tiles.py; docs/operator-model.md, "Candidates"):
its shared-memory closed form, the invariants against the sm_90 `wgmma` pricing that priced Blackwell before
it, and the Hopper and Ampere prices pinned to what they were."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from rapidllm.ops.gemm import price_gemms
from rapidllm.ops.tiles import TMEM_COLUMNS, build_catalog, mma_style, tcgen05_smem_rows
from rapidllm.spec.hardware import HardwareSpec
from rapidllm.spec.named import resolve_named
from test_gemm_kernel import make_hw


def named(name: str) -> HardwareSpec:
    mapping, where = resolve_named("hardware", name, "test", "hardware")
    return HardwareSpec.from_mapping(mapping, where)


def as_hopper(hw: HardwareSpec) -> HardwareSpec:
    """The same device priced with the wgmma style, as every cc >= 9.0 device was before tcgen05."""
    return replace(hw, compute_capability="9.0")


@pytest.fixture(scope="module")
def b200() -> HardwareSpec:
    return named("b200")


def test_style_follows_compute_capability():
    """B200 and GB200 are sm_100, GB300 sm_103: tcgen05; Hopper parts wgmma; A100 mma.sync. Without a compute
    capability an NVFP4 rate marks sm_100, an FP8 rate sm_90."""
    styles = {n: mma_style(named(n)) for n in ("b200", "gb200", "gb300", "h100-sxm5-80gb", "h200", "h800",
                                                "a100-sxm4-80gb", "a100-sxm4-40gb")}
    assert styles == {"b200": "sm100", "gb200": "sm100", "gb300": "sm100", "h100-sxm5-80gb": "sm90",
                      "h200": "sm90", "h800": "sm90", "a100-sxm4-80gb": "sm80", "a100-sxm4-40gb": "sm80"}
    rates = {"bf16": 1e15, "fp8": 2e15}
    assert mma_style(make_hw(tensor_flops=rates)) == "sm90"
    assert mma_style(make_hw(tensor_flops={**rates, "fp4": 4e15})) == "sm100"
    assert mma_style(make_hw()) == "sm80"


def test_tcgen05_shared_memory_bytes_closed_form(b200):
    """A 256x256 CTA-pair MMA over a 64-element bf16 K slab (128 B of operand row): each CTA's shared memory
    is written its 128 A rows and its half of B (128 rows) by TMA, and read its 128 A rows once plus its 128
    B rows twice (its own tensor core and the peer's): (2*128 + 1.5*256) rows x 64 x 2 B = 80 KiB per
    k-iteration, against 96 KiB for the 1SM 128x256 tile (2 x (128 + 256) rows). Its stage buffers hold
    128 + 128 rows; the pricing kernel charges exactly these bytes per k-iteration."""
    assert tcgen05_smem_rows(128, 256, 2) == 640 and tcgen05_smem_rows(128, 256, 1) == 768
    cat = build_catalog(b200, "bf16")
    pair = (cat.cta_m == 128) & (cat.cta_n == 256) & (cat.cta_group == 2) & (cat.cta_k == 64)
    one = (cat.cta_m == 128) & (cat.cta_n == 256) & (cat.cta_group == 1) & (cat.cta_k == 64)
    assert pair.any() and one.any()
    assert np.all(cat.smem_rows[pair] * 64 * 2 == 80 * 1024) and np.all(cat.smem_rows[one] * 64 * 2 == 96 * 1024)
    assert np.all(cat.smem[pair] == cat.stages[pair] * 256 * 64 * 2 + 1024)
    assert np.all(cat.smem[one] == cat.stages[one] * 384 * 64 * 2 + 1024)
    # the kernel's shared-memory time of the winner: busiest SM's CTAs x k-iterations x rows x K x 2 B / BW
    pr = price_gemms(named("gb200"), [1], [16384], [16384], [16384], "bf16")
    t = pr.tile(0)
    assert t["cta_group"] == 2 and pr.split_k[0] == 1
    tiles = math.ceil(16384 / t["cta_m"] / t["cluster_m"]) * t["cluster_m"] * math.ceil(16384 / t["cta_n"])
    per_sm = math.ceil(tiles / named("gb200").sm_count)
    rows = 2 * t["cta_m"] + 1.5 * t["cta_n"]
    smem_s = per_sm * (16384 // t["cta_k"]) * rows * t["cta_k"] * 2 / named("gb200").smem_bandwidth_per_sm
    assert math.isclose(pr.smem_s[0], smem_s, rel_tol=1e-12)


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "tf32", "fp4"])
def test_tcgen05_reads_no_more_shared_memory_per_flop_than_wgmma(b200, dtype):
    """For the same output tile of one MMA (a CTA, or a CTA pair's 2 cm x cn) and the same K slab, the tcgen05
    style moves no more shared-memory bytes than the wgmma pricing: strictly fewer for a 1SM tile of 128 rows
    (one read of B where Hopper's two consumer warpgroups read it twice), as many for a 64-row tile (one
    warpgroup reads each operand once, as the MMA does) and for a pair as for a Hopper CTA of two consumer
    warpgroups (each of the pair's tensor cores, like each warpgroup, reads all of B)."""
    tc, wg = build_catalog(b200, dtype), build_catalog(as_hopper(b200), dtype)
    compared = 0
    for i in range(len(tc)):
        g = int(tc.cta_group[i])
        same = (wg.cta_m == g * tc.cta_m[i]) & (wg.cta_n == tc.cta_n[i]) & (wg.cta_k == tc.cta_k[i])
        if not same.any():
            continue
        compared += 1
        assert g * tc.smem_rows[i] <= wg.smem_rows[same].min()
        if g == 1 and tc.cta_m[i] == 128:
            assert tc.smem_rows[i] < wg.smem_rows[same].min()
    assert compared >= 10


def test_tcgen05_candidates_follow_cutlass_sm100(b200):
    """The sm100 builders' tile shapes (1SM: M 64/128; pair: M 128/256, i.e. 64/128 per CTA; N 64..256), the
    warp-specialized kernel's 256 threads whose registers hold no accumulators, and the tensor-memory limit:
    resident CTAs x accumulator columns <= 512."""
    for dtype in ("bf16", "fp8", "fp4"):
        cat = build_catalog(b200, dtype)
        assert set(cat.cta_m.tolist()) == {64, 128} and set(cat.cta_n.tolist()) == {64, 128, 192, 256}
        assert np.all(cat.threads == 256) and np.all(cat.regs == 64)
        assert np.all(cat.tmem_cols == cat.cta_m * cat.cta_n // 128)
        assert np.all(cat.occupancy * cat.tmem_cols <= TMEM_COLUMNS)
        assert set(cat.cluster_m[cat.cta_group == 1].tolist()) == {1, 2}
        assert set(cat.cluster_m[cat.cta_group == 2].tolist()) == {2, 4}
    # a 128x256 fp32 accumulator is 256 columns: two fit, and the shared memory allows two at low depth
    cat = build_catalog(b200, "bf16")
    assert cat.occupancy[(cat.cta_m == 128) & (cat.cta_n == 256)].max() == 2


def _random_shapes(n: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    b = rng.integers(1, 9, n)
    return (b, *(np.exp(rng.uniform(0, np.log(65536), n)).astype(np.int64) for _ in range(3)))


@pytest.mark.parametrize("name, dtype", [("b200", "bf16"), ("b200", "fp8"), ("gb300", "fp4")])
def test_blackwell_gemm_not_slower_than_the_wgmma_pricing(name, dtype):
    """Against the pricing every Blackwell device had before (wgmma, the same spec at cc 9.0), over 20,000
    random shapes: never slower where the wgmma winner's tile is one tcgen05 also has (<= 128 rows per CTA:
    the same tile with no more shared-memory bytes and at least the occupancy). The wgmma 256-row CTA tiles
    have no sm100 counterpart (the builders make 256 rows a CTA pair, two CTAs on two SMs); where one of those
    won, the pair can be slower: over 100,000 random shapes on B200, GB200 and GB300 in bf16, fp8, tf32 and
    fp4 (1-1.5% of them) by at most 5.2%, 3.2% at 10 us and more, 0.31% at 50 us and more. The pair moves the
    same bytes per output as the 256-row tile over twice the CTAs, so its rounds, latency terms and epilogue
    stores (priced at the SM's share of L2 bandwidth, every SM active) fall differently. A third of the
    shapes gain over 1%, up to 2x; the 16k GEMM of docs/new-device.md gains 11.8% on B200 at H100's compute
    constant and 1.2% at B200's own (0.534), where the wgmma pricing's shared-memory term is nearly below the
    compute bound too."""
    hw = named(name)
    b, m, n, k = _random_shapes(20_000, 5)
    new, old = price_gemms(hw, b, m, n, k, dtype), price_gemms(as_hopper(hw), b, m, n, k, dtype)
    ratio = new.time_s / old.time_s
    own_tile = old.catalog.cta_m[old.candidate] <= 128
    assert np.all(ratio[own_tile] <= 1 + 1e-12)
    assert np.all(ratio <= 1.052) and np.all(ratio[old.time_s >= 10e-6] <= 1.033)
    assert np.all(ratio[old.time_s >= 50e-6] <= 1.005)
    assert np.median(ratio) <= 1.0 and ratio.min() < 0.7
    if name == "b200" and dtype == "bf16":
        big = [price_gemms(h, [1], [16384], [16384], [16384], "bf16").time_s[0] for h in (hw, as_hopper(hw))]
        assert big[0] < big[1]


@pytest.mark.parametrize("name, dtype, times", [
    ("h100-sxm5-80gb", "bf16", [0.01319251501429461, 6.0695142707784535e-05, 0.00011220198940658428,
                                6.327101611940298e-06]),
    ("h100-sxm5-80gb", "fp8", [0.006651331164969449, 3.229992386528815e-05, 5.987251861198298e-05,
                               5.648854325095832e-06]),
    ("a100-sxm4-80gb", "bf16", [0.03725541957660896, 0.00010985196944473285, 0.00031530550792262203,
                                1.0007213003175662e-05]),
    ("a100-sxm4-80gb", "tf32", [0.07443137816031015, 0.00021592834905197626, 0.0006236322924409887,
                                1.4613007566635016e-05])])
def test_hopper_and_ampere_prices_unchanged(name, dtype, times):
    """The shared-memory rows moved into a catalog column: H100 and A100 GEMMs price to the bit as before it
    (values from the pricing of commit 045c9bb at the files' calibrated constants), with 54 and 35 bf16
    candidates."""
    hw = named(name)
    shapes = [(1, 16384, 16384, 16384), (1, 8, 8192, 8192), (4, 2048, 1024, 4096), (1, 777, 1234, 333)]
    assert price_gemms(hw, *zip(*shapes), dtype).time_s.tolist() == times
    assert len(build_catalog(hw, "bf16")) == (54 if name.startswith("h100") else 35)
