"""FP4 serving as the engines run NVFP4 checkpoints (docs/fp4.md): under `precision: fp4` the GEMMs of the
blocks read E2M1 operands with one E4M3 scale per 16 elements (0.5625 B per element stored) at the fp4 tensor
rate and write BF16; attention, norms, the KV cache, collectives, the router and the LM head stay BF16; the
weights of the block GEMMs are stored at 0.5625 B, the embedding and LM head at BF16. Devices without an fp4
rate and training refuse it."""
import copy
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.memory.closed_form import closed_form_memory
from rapidllm.memory.model import memory_for_case
from rapidllm.memory.state import stage_params
from rapidllm.ops.gemm import price_gemms, roofline_gemm_time
from rapidllm.ops.params import parameter_counts
from rapidllm.ops.price import local_parameters, price_case
from rapidllm.ops.tiles import CTA_K_BYTES, build_catalog
from rapidllm.spec.case import load_case, resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.hardware import DTYPE_BYTES, HardwareSpec
from rapidllm.spec.named import resolve_named

NVFP4 = 0.5 + 1 / 16                 # E2M1 (4 bits) + one E4M3 scale (8 bits) per 16 elements
SERVE = {"model": "llama3.1-70b", "hardware": "b200", "network": "dgx-b200",
         "workload": {"mode": "inference", "batch": 8, "prompt_tokens": 1024, "output_tokens": 256},
         "parallelism": {"tp": 4}}


@pytest.fixture(scope="module")
def b200() -> HardwareSpec:
    m, where = resolve_named("hardware", "b200", "test", "hardware")
    return HardwareSpec.from_mapping(m, where)


def _cases(base: dict, precisions=("bf16", "fp8", "fp4")) -> dict:
    return {p: resolve_case({**copy.deepcopy(base), "precision": p}, "test") for p in precisions}


@pytest.mark.parametrize("name, fp4", [("b200", 18e15 / 2), ("gb200", 1440e15 / 72 / 2), ("gb300", 1080e15 / 72),
                                       ("a100-sxm4-80gb", None), ("h100-sxm5-80gb", None), ("h200", None),
                                       ("h800", None)])
def test_fp4_rate_where_the_datasheets_give_one(name, fp4):
    """Dense FP4 from the datasheets: B200 18 PF per GPU with sparsity (HGX/DGX B200), GB200 1,440 PF per NVL72
    rack with sparsity, GB300 1,080 PF dense per rack; Ampere and Hopper have no FP4 MMA."""
    m, where = resolve_named("hardware", name, "test", "hardware")
    hw = HardwareSpec.from_mapping(m, where)
    assert hw.tensor_flops.get("fp4") == (pytest.approx(fp4) if fp4 else None)


def test_stored_bytes_and_catalog_k_depth(b200):
    """NVFP4 stores 4.5 bits per element; the tile catalog's K depth counts packed 4-bit elements (64 B and
    128 B of operand row: 128 and 256 elements, CUTLASS's sm100 NVFP4 tile K is 256), its shared memory the
    stored bytes, scales included."""
    assert DTYPE_BYTES["fp4"] == NVFP4 == 0.5625
    cat = build_catalog(b200, "fp4")
    assert sorted(set(cat.cta_k.tolist())) == [int(kb / 0.5) for kb in CTA_K_BYTES] == [128, 256]
    i = int(np.argmax(cat.smem))
    assert cat.smem[i] == np.ceil(cat.stages[i] * (cat.cta_m[i] + cat.cta_n[i]) * cat.cta_k[i] * NVFP4) + 1024


def test_fp4_gemm_between_its_roofline_and_fp8(b200):
    """Over 20,000 random shapes on B200: never faster than the roofline at the fp4 rate and stored bytes,
    never faster than half the FP8 time (both the rate and the bytes improve by at most 2x), and never slower
    than FP8 once K spans a few FP4 K tiles (K >= 1024: every layer GEMM of Llama-3.1-70B and 405B at tp <= 8,
    of 8B at tp <= 4). Below that the FP4 tile's coarser K (128 elements, 72 B of operand row with scales, against FP8's 64
    elements, 64 B) pads short K loops and allows fewer split-K ways: at most the 12.5% more shared-memory
    bytes of one padded slab (2.7% the most seen over 100,000 shapes, at K = 1)."""
    rng = np.random.default_rng(7)
    n = 20_000
    b = rng.integers(1, 9, n)
    m, nn, k = (np.exp(rng.uniform(0, np.log(65536), n)).astype(np.int64) for _ in range(3))
    t4 = price_gemms(b200, b, m, nn, k, "fp4").time_s
    t8 = price_gemms(b200, b, m, nn, k, "fp8").time_s
    assert np.all(t4 >= roofline_gemm_time(b200, m, nn, k, "fp4", b) * (1 - 1e-12))
    assert np.all(t4 >= 0.5 * t8)
    assert np.all(t4[k >= 1024] <= t8[k >= 1024])
    assert np.all(t4 <= 1.125 * t8)


def test_decode_gemm_time_scales_with_stored_bytes(b200):
    """A memory-bound decode GEMM (batch 8) reads its weights once: in FP4 its time above the launch is the
    FP8 time x 0.5625 within 1% for the MLP projections of Llama-3.1-70B at tp 4 and 405B at tp 8 (n x k >=
    58M weights per GPU, 82% of a layer's); the smaller QKV and output projections gain less (ratio up to 0.66:
    with fewer bytes to move they turn shared-memory or latency bound), never more than the bytes (1%)."""
    L = b200.launch_overhead_s
    big = [(14336, 8192), (8192, 7168), (13312, 16384), (16384, 6656)]          # mlp_up, mlp_down
    small = [(2560, 8192), (8192, 2048), (2304, 16384), (16384, 2048)]           # qkv, o_proj
    for shapes, lo, hi in ((big, 0.99, 1.01), (small, 0.99, 0.66 / NVFP4)):
        n, k = np.array(shapes).T
        r = (price_gemms(b200, 1, 8, n, k, "fp4").time_s - L) / (price_gemms(b200, 1, 8, n, k, "fp8").time_s - L)
        assert np.all((r >= lo * NVFP4) & (r <= hi * NVFP4)), r


def test_weights_at_stored_size_embedding_and_head_bf16():
    """Weights per GPU (closed form and the per-stage model alike): the block GEMMs' parameters at 0.5625 B, the
    token embedding and LM head at 2 B (NVFP4 checkpoints quantize only the linear layers of the blocks)."""
    c = _cases(SERVE)
    counts = parameter_counts(c["fp4"].model)
    emb_head = (counts.embedding + counts.lm_head) / 4                   # tp 4, pp 1: both on every rank
    # the two counts differ by the norms (whole on every rank per stage, split over tp in the closed form)
    for params, memory in ((stage_params(c["fp4"], 0).total, memory_for_case),
                           (local_parameters(c["fp4"]), closed_form_memory)):
        assert memory(c["fp4"]).weights == pytest.approx((params - emb_head) * NVFP4 + emb_head * 2, rel=1e-12)
        assert memory(c["bf16"]).weights == pytest.approx(params * 2, rel=1e-12)


def test_attention_kv_collectives_as_fp8():
    """Everything but the block GEMMs is BF16 in FP8 and FP4 alike: attention, norms, rope, residuals and the
    LM head price the same; the KV cache and every collective carry the same bytes; the block GEMMs are faster."""
    c = _cases(SERVE, ("fp8", "fp4"))
    o8, o4 = price_case(c["fp8"]), price_case(c["fp4"])
    assert list(o8.name) == list(o4.name)
    block = (o8.kind == "gemm") & (o8.name != "lm_head")
    assert (o4.time_s[~block] == o8.time_s[~block]).all()
    assert (o4.bytes == o8.bytes).all()
    assert (o4.time_s[block] < o8.time_s[block]).all()
    assert memory_for_case(c["fp4"]).kv_cache == memory_for_case(c["fp8"]).kv_cache
    assert memory_for_case(c["fp4"]).activations == memory_for_case(c["fp8"]).activations
    assert [(n.axis, n.op, n.nbytes) for n in communication_nodes(c["fp4"])] == \
           [(n.axis, n.op, n.nbytes) for n in communication_nodes(c["fp8"])]


def test_fp4_refused_without_fp4_units_or_in_training():
    for hw, net in (("h100-sxm5-80gb", "dgx-h100"), ("a100-sxm4-80gb", "dgx-a100"), ("h200", "dgx-h100"),
                    ("h800", "h800-ib")):
        with pytest.raises(SpecError, match=f"^test: precision: {hw} has no fp4 tensor units; allowed: bf16"):
            resolve_case({**copy.deepcopy(SERVE), "hardware": hw, "network": net, "precision": "fp4"}, "test")
    train = {**copy.deepcopy(SERVE), "precision": "fp4",
             "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8}}
    with pytest.raises(SpecError, match="^test: precision: fp4 is a serving precision"):
        resolve_case(train, "test")


def test_case_ids_unchanged():
    """The ids of existing cases are those main gave before FP4 existed (2026-12-02, 7bdc350): no Case field was
    added. (Cases on b200, gb200 and gb300 change id: their device files gained the fp4 rate, as any edit of a
    hardware file does.)"""
    assert load_case("examples/gpt175b-tp8-pp8.yaml").case_id == "50bcfc8a2e2efcd3"
    assert load_case("examples/deepseek-v3-8xh200-serving.yaml").case_id == "a8d9dd212b14b519"
    assert load_case("examples/gpt530b-deepspeed.yaml").case_id == "5fa7956e6ba6d0f7"


def test_predict_llama70b_tp4_fp4_faster_than_fp8_not_twice(tmp_path):
    """End to end through `rapidllm predict`: Llama-3.1-70B on 4 B200 (tp 4), 8 requests of 1024 + 256 tokens."""
    out = {}
    for p in ("fp8", "fp4"):
        path = tmp_path / f"{p}.yaml"
        path.write_text(yaml.safe_dump({**copy.deepcopy(SERVE), "precision": p}))
        run = subprocess.run([sys.executable, "-m", "rapidllm.cli", "predict", str(path), "--json"],
                             capture_output=True, text=True, check=True)
        out[p] = json.loads(run.stdout)
    f8, f4 = out["fp8"], out["fp4"]
    assert f4["status"] == f8["status"] == "ok"
    for key in ("ttft_s", "itl_s", "e2e_latency_s"):
        assert f4[key] < f8[key] < 2 * f4[key], key
    assert f4["kv_cache_bytes"] == f8["kv_cache_bytes"] and f4["weights_bytes"] < 0.61 * f8["weights_bytes"]
