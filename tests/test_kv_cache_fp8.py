"""FP8 KV cache (`kv_cache_precision: fp8`, docs/fp8.md): the cache at 1 B per element in memory, in the
decode kernels' HBM reads and in the K written by the kernel that rotates it; prefill attention, GEMMs and
collectives untouched; the key checked, hashed only when set and carried by search specs and sweeps."""
import copy
import random

import pytest
import yaml

from rapidllm import predict, search, sweep
from rapidllm.explore.search_hook import search_spec
from rapidllm.memory.closed_form import kv_cache_bytes
from rapidllm.memory.model import kv_cache_per_token, memory_for_case
from rapidllm.ops.attention import decode_attention, kv_math
from rapidllm.ops.attention_per_head import per_head_decode
from rapidllm.search.spec import load_search
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.validate.kernels import load_hardware

# Llama-3.1-70B on 4 x H100 (TensorRT-LLM, Hopper-native attention) as a decode instance of 64 sequences
# of 8k tokens: the cache of the 64 running sequences is what every decode step streams
SERVE = {"model": "llama3.1-70b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "bf16",
         "attention_impl": "flash3", "framework": "tensorrt-llm", "parallelism": {"tp": 4},
         "workload": {"mode": "inference", "batch": 1, "concurrency": 64, "prompt_tokens": 8192,
                      "output_tokens": 128, "serving": "disaggregated"}}
FP8 = {"kv_cache_precision": "fp8"}


def case(mapping: dict, **extra):
    return resolve_case({**copy.deepcopy(mapping), **extra}, "test")


@pytest.mark.parametrize("model, tp", [("llama3.1-70b", 4), ("llama2-7b", 1), ("llama2-7b", 2)])
def test_cache_bytes_halve_in_closed_form(model, tp):
    """GQA (8 KV heads over tp 4) and MHA (32 heads): 2 x kv heads per rank x head dim x 1 B per token and
    layer, half the BF16 cache, in the closed form and in the memory model (per sequence held: a BF16
    cache the pool cannot hold for every client holds fewer sequences, memory/kv_pool.py)."""
    base = {**SERVE, "model": model, "parallelism": {"tp": tp},
            "workload": {**SERVE["workload"], "prompt_tokens": 2048}}
    bf16, fp8 = case(base), case(base, **FP8)
    m = fp8.model
    assert kv_cache_per_token(fp8) == 2 * max(m.kv_heads // tp, 1) * m.head_dim
    assert kv_cache_per_token(fp8) * 2 == kv_cache_per_token(bf16)
    assert kv_cache_bytes(fp8) * 2 == kv_cache_bytes(bf16)
    held = [(r.kv_cache, r.admission.sequences) for r in (memory_for_case(fp8), memory_for_case(bf16))]
    assert held[0][0] / held[0][1] * 2 == pytest.approx(held[1][0] / held[1][1], rel=1e-12)
    assert memory_for_case(fp8).weights == memory_for_case(bf16).weights


def test_twice_the_sequences_fit():
    """The cache is the only memory the running sequences hold: where the pool cannot hold the BF16 cache
    of C sequences (the engine admits fewer, memory/kv_pool.py), it holds the FP8 cache of all C; a request
    reserves exactly half the bytes, so the pool holds twice the requests (one more where the halves of the
    remainder add up)."""
    tight = {**SERVE, "workload": {**SERVE["workload"], "concurrency": 72}}
    assert memory_for_case(case(tight)).admission.limit == "kv_cache"
    assert memory_for_case(case(tight, **FP8)).admission.limit == "concurrency"
    double = {**SERVE, "workload": {**SERVE["workload"], "concurrency": 256}}
    bf16, fp8 = memory_for_case(case(double)).admission, memory_for_case(case(double, **FP8)).admission
    assert fp8.request_bytes * 2 == bf16.request_bytes
    assert fp8.kv_sequences - 2 * bf16.kv_sequences in (0, 1)


@pytest.fixture(scope="module")
def devices():
    return [load_hardware(name, "spec") for name in ("h100-sxm5-80gb", "a100-sxm4-80gb", "h200", "b200")]


def test_decode_reads_half_the_cache_and_is_never_slower(devices):
    """Over 160 random decode shapes on four devices, both decode kernels and both FlashAttention
    generations, one or two queries per sequence: HBM bytes fall by exactly the cache's element count (2 B
    -> 1 B per element, read once per step; queries, outputs and split partials unchanged). The grouped
    kernel is never slower where it runs FP8 MMAs, nor on the A100 and H100 where it widens: decode
    attention is HBM-bound and the widening hides under the halved stream. On the H200 and B200 (14-20 B
    of HBM per SM clock against 32 widened elements) an FA-2-class kernel that widens can come out
    slower on a small step (a cache of a few MB, a launch-dominated kernel): by under 3%. Per-query-head
    kernels widen every element once per query head (a GQA group can make them conversion-bound), and a CTA
    alone on its SM pulls FP8 from L2 about as fast as it widens it: never slower on MHA grids that fill
    the device."""
    rng = random.Random(11)
    for _ in range(160):
        hw = rng.choice(devices)
        kv_heads = rng.choice([1, 2, 4, 8])
        q_heads = kv_heads * rng.choice([1, 2, 4, 8])
        batch, kv, d = rng.choice([1, 4, 16, 64, 256]), rng.choice([16, 300, 2048, 8192, 32768]), rng.choice([64, 128])
        impl, q_len = rng.choice(["flash", "flash3"]), rng.choice([1, 1, 2])
        bf16 = decode_attention(hw, batch, q_heads, kv_heads, kv, d, d, "bf16", impl, q_len=q_len)
        fp8 = decode_attention(hw, batch, q_heads, kv_heads, kv, d, d, "bf16", impl, q_len=q_len, kv_dtype="fp8")
        cache = batch * kv_heads * kv * 2 * d               # elements; two queries see the last key only once
        assert bf16.kv_reread_bytes == pytest.approx(2 * cache * (1 if q_len == 1 else 1 - 0.5 / kv), rel=1e-12)
        assert bf16.hbm_bytes - fp8.hbm_bytes == pytest.approx(bf16.kv_reread_bytes / 2, rel=1e-12)
        if not kv_math(hw, "bf16", "fp8", impl)[1] or hw.name in ("h100-sxm5-80gb", "a100-sxm4-80gb"):
            assert fp8.time_s <= bf16.time_s
        elif fp8.time_s > bf16.time_s:
            assert cache < 4e6 and fp8.time_s < 1.03 * bf16.time_s
        if q_len == 1:
            head = per_head_decode(hw, batch, q_heads, kv_heads, kv, d, d, "bf16")
            head8 = per_head_decode(hw, batch, q_heads, kv_heads, kv, d, d, "bf16", "fp8")
            assert head.hbm_bytes - head8.hbm_bytes == pytest.approx(cache, rel=1e-12)
            if q_heads == kv_heads and batch * q_heads >= hw.sm_count:
                assert head8.time_s <= head.time_s


def test_which_kernels_widen_the_cache(devices):
    """Hopper-native kernels run FP8 MMAs on an FP8 cache (XQA's mha_sm90, FlashAttention-3); FA-2-class
    kernels and devices without FP8 tensor cores widen it to the activation type first."""
    h100, a100 = devices[:2]
    assert kv_math(h100, "bf16", "fp8", "flash3") == ("fp8", False)
    assert kv_math(h100, "bf16", "fp8", "flash") == ("bf16", True)
    assert kv_math(a100, "bf16", "fp8", "flash3") == ("bf16", True)
    assert kv_math(h100, "bf16", "bf16", "flash3") == ("bf16", False)


def test_long_context_decode_itl_falls_by_half_the_cache_stream():
    """Llama-3.1-70B, tp 4, H100, 64 sequences at 8k: each decode step streams its rank's cache, 64 x
    context x 2 x 2 KV heads x 128 x 2 B per layer (43 GB over 80 layers at ~8.26k tokens), at the HBM
    rate. The FP8 cache streams half of it, so the ITL falls by half that streaming time t_kv / 2, and by
    no more (everything else of the step reads the same bytes; the K written per step is 64 x 256 B per
    layer): between 0.95 and 1.01 t_kv / 2, with the Hopper-native kernel and with FA-2 (which widens)."""
    c = case(SERVE)
    hw, w, m = c.hardware, c.workload, c.model
    context = w.prompt_tokens + 0.5 * (1 + w.output_tokens)           # mean of the first and last decode step
    kv_bytes = m.layers * w.concurrency * context * 2 * (m.kv_heads // 4) * m.head_dim * 2
    t_kv = kv_bytes / (hw.hbm_bandwidth * hw.utilization.hbm)
    for impl in ("flash3", "flash"):
        bf16 = predict({**SERVE, "attention_impl": impl})
        fp8 = predict({**SERVE, "attention_impl": impl, **FP8})
        assert 0.95 * t_kv / 2 <= bf16.itl_s - fp8.itl_s <= 1.01 * t_kv / 2
        assert fp8.tokens_per_s > 1.2 * bf16.tokens_per_s


def test_prefill_changes_only_by_the_cache_write():
    """A prefill attends to its own K and V (the QKV output), so only the kernel that rotates K and writes
    it to the cache changes: T x kv heads x head dim x 1 B less per layer, at most that over the HBM rate
    (8192 tokens: 168 MB, 71 us of a 0.68 s TTFT)."""
    static = {**SERVE, "workload": {"mode": "inference", "batch": 1, "prompt_tokens": 8192, "output_tokens": 8}}
    c = case(static)
    hw, m = c.hardware, c.model
    bound = m.layers * 8192 * (m.kv_heads // 4) * m.head_dim / (hw.hbm_bandwidth * hw.utilization.hbm)
    bf16, fp8 = predict(static), predict({**static, **FP8})
    assert 0.0 < bf16.ttft_s - fp8.ttft_s <= bound * (1 + 1e-9)


def test_key_is_checked_and_hashed_only_when_set():
    base = case(SERVE)
    assert base.kv_cache_precision == "auto" and base.kv_precision == "bf16"
    for same in ("auto", "bf16"):
        assert case(SERVE, kv_cache_precision=same).case_id == base.case_id
    fp8_weights = case(SERVE, precision="fp8", kv_cache_precision="bf16")     # FP8 serving: activations BF16
    assert fp8_weights.case_id == case(SERVE, precision="fp8").case_id and fp8_weights.kv_precision == "bf16"
    assert case(SERVE, **FP8).case_id != base.case_id and case(SERVE, **FP8).kv_precision == "fp8"
    with pytest.raises(SpecError, match=r"test: kv_cache_precision: fp16 is neither the activation precision "
                                        r"\(bf16\) nor fp8; allowed: auto, bf16, fp8"):
        case(SERVE, kv_cache_precision="fp16")
    with pytest.raises(SpecError, match="kv_cache_precision"):
        case(SERVE, kv_cache_precision="int8")
    training = {**SERVE, "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8}}
    with pytest.raises(SpecError, match="test: kv_cache_precision: fp8 stores the KV cache of inference decode"):
        case(training, **FP8)
    with pytest.raises(SpecError, match="test: attention_impl: naive does not read an FP8 KV cache"):
        case(SERVE, attention_impl="naive", **FP8)
    with pytest.raises(SpecError, match="test: kv_cache_precision: deepseek-v2-lite uses MLA"):
        case({**SERVE, "model": "deepseek-v2-lite", "parallelism": {"tp": 1}}, **FP8)


def test_search_specs_sweeps_and_the_explorer_carry_the_key(tmp_path):
    spec = {"name": "s", "model": "llama3.1-8b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100",
            "workload": {"mode": "inference", "prompt_tokens": 2048, "output_tokens": 128}, "gpus": 1,
            "space": {"batch": [8]}, **FP8}
    assert {c.base.kv_precision for c in load_search(spec).candidates} == {"fp8"}
    ranked = search({**spec, "space": {"batch": [8], "attention_impl": ["flash", "naive"]}}, top=5)
    assert list(ranked.attention_impl) == ["flash"] and ranked.kv_cache_bytes.iloc[0] > 0
    assert search_spec({**SERVE, **FP8}, 4, "itl_s")["kv_cache_precision"] == "fp8"
    exp = {"name": "kv", "base": {**SERVE, "model": "llama3.1-8b", "parallelism": {"tp": 1},
                                  "workload": {**SERVE["workload"], "concurrency": 32}},
           "cross": {"kv_cache_precision": ["auto", "fp8"]}}
    path = tmp_path / "kv.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    table = sweep(path)
    assert list(table.kv_cache_precision) == ["auto", "fp8"]
    assert table.itl_s.iloc[1] < table.itl_s.iloc[0] and table.peak_memory_bytes.iloc[1] < table.peak_memory_bytes.iloc[0]
