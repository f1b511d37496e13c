"""Parallel transformer blocks (`model.block: parallel`, GPT-J / GPT-NeoX-20B / PaLM / Falcon):
y = x + Attn(LN(x)) + MLP(LN(x)). Same GEMMs and attention as the sequential block; the two branches'
row-parallel partial sums are reduced once, so TP moves fewer bytes (docs/operator-model.md, "Parallel
blocks")."""
from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

import rapidllm
from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.graph.templates import COMM, case_templates, layer_tokens
from rapidllm.memory.liveness import layer_liveness
from rapidllm.ops.operators import ATTENTION, GEMM
from rapidllm.ops.price import price_case
from rapidllm.ops.workload import Shard, layer_forward, layer_training
from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.model import ModelSpec

SHAPE: dict[str, Any] = dict(name="m", hidden=2048, layers=2, heads=16, ffn=8192, vocab=32000, mlp="plain",
                             norm="layernorm")
TRAIN = dict(mode="training", seq_len=2048, global_batch=4, micro_batch=1)
INFER = dict(mode="inference", batch=4, prompt_tokens=512, output_tokens=16)


def model(block: str, norms: int = 1, shape: dict[str, Any] = SHAPE) -> dict[str, Any]:
    """The same shapes as a sequential block or as a parallel one with `norms` norms."""
    return dict(shape, block=block, parallel_norms=norms) if block == "parallel" else dict(shape)


def case(m: dict[str, Any], tp: int, sp: bool, workload: dict[str, Any] = TRAIN, **parallel: Any) -> Case:
    return resolve_case(dict(model=m, hardware="h100-sxm5-80gb", network="dgx-h100", precision="bf16",
                             workload=workload, parallelism=dict(tp=tp, pp=1, dp=1, sp=sp, **parallel)), "test")


def tp_collectives(c: Case) -> dict[tuple[str, str], Counter]:
    """(section, part) -> Counter of (op, bytes) of the TP collectives in each layer template."""
    out = {}
    for t in case_templates(c, price_case(c)):
        if "layer_" in t.section:
            out[t.section, t.part] = Counter((n.op, n.nbytes) for n in t.nodes if n.kind == COMM and n.axis == "tp")
    return out


@pytest.mark.parametrize("norms", [1, 2])
def test_tp_collectives_per_layer_closed_form(norms: int) -> None:
    """tp 4, training: every collective carries the layer's gathered activation, A = s·b·h·2 bytes.
    Sequential (Megatron-LM): forward 2 all-reduces, backward 2; with SP forward 2 all-gathers + 2
    reduce-scatters, backward 4 all-gathers (2 of the output gradient, 2 re-gathers for the weight gradients)
    + 2 reduce-scatters. Parallel: forward 1 all-reduce (or 1 reduce-scatter after one all-gather per norm),
    backward one all-reduce (reduce-scatter) per norm, and under SP one gather of the output gradient plus
    the same 2 re-gathers."""
    a = 2048 * 2048 * 2.0
    ar, ag, rs = ("all_reduce", a), ("all_gather", a), ("reduce_scatter", a)
    seq = tp_collectives(case(model("sequential"), 4, False))
    par = tp_collectives(case(model("parallel", norms), 4, False))
    assert seq[("layer_dense", "fwd")] == Counter({ar: 2}) and seq[("layer_dense", "bwd")] == Counter({ar: 2})
    assert par[("layer_dense", "fwd")] == Counter({ar: 1})
    assert par[("layer_dense", "bwd")] == Counter({ar: norms})
    seq = tp_collectives(case(model("sequential"), 4, True))
    par = tp_collectives(case(model("parallel", norms), 4, True))
    assert seq[("layer_dense", "fwd")] == Counter({ag: 2, rs: 2})
    assert seq[("layer_dense", "bwd")] == Counter({ag: 4, rs: 2})
    assert par[("layer_dense", "fwd")] == Counter({ag: norms, rs: 1})
    assert par[("layer_dense", "bwd")] == Counter({ag: 3, rs: norms})


def test_inference_reduces_once_per_layer() -> None:
    """Prefill and decode (no SP in serving): one all-reduce per parallel layer instead of two, of the
    pass's tokens (prompt, then one per sequence and step)."""
    for norms in (1, 2):
        c = case(model("parallel", norms), 4, False, INFER)
        s = case(model("sequential"), 4, False, INFER)
        for (section, _), got in tp_collectives(c).items():
            prefix = section.removesuffix("layer_dense")
            a = layer_tokens(c, prefix) * 2048 * 2.0
            assert got == Counter({("all_reduce", a): 1}), section
            assert tp_collectives(s)[section, "fwd"] == Counter({("all_reduce", a): 2})


def test_baseline_counts_follow_the_templates() -> None:
    """The alpha-beta ablation's per-traversal count: training (1 + norms) / 2 (one forward, one per norm
    backward), inference 1; sequential 2."""
    def count(c: Case) -> float:
        return sum(n.count for n in communication_nodes(c) if n.axis == "tp" and n.scope == "layer_dense")
    assert count(case(model("sequential"), 4, True)) == 2
    assert count(case(model("parallel", 1), 4, True)) == 1
    assert count(case(model("parallel", 2), 4, False)) == 1.5
    assert count(case(model("parallel", 2), 4, False, INFER)) == 1


@pytest.mark.parametrize("block, norms", [("sequential", 1), ("parallel", 1), ("parallel", 2)])
def test_recomputed_mlp_gathers_its_input_again(block: str, norms: int) -> None:
    """Selective recompute of the MLP alone (recompute_modules: mlp) under SP re-runs mlp_up on the norm
    output, which is kept sequence-sharded: one all-gather before it in the recompute, whichever norm it
    reads (with one norm, the one whose forward gather qkv consumed; it had none)."""
    c = case(model(block, norms), 4, True, recompute="selective", recompute_modules=["mlp"])
    t = next(t for t in case_templates(c, price_case(c)) if t.section == "layer_dense" and t.part == "bwd")
    up = next(i for i, n in enumerate(t.nodes) if n.name == "mlp_up" and n.phase == "recompute")
    before = [i for i, n in enumerate(t.nodes[:up]) if n.kind == COMM]
    assert [(t.nodes[i].axis, t.nodes[i].op, t.nodes[i].nbytes) for i in before] == \
        [("tp", "all_gather", 2048 * 2048 * 2.0)]
    assert before[0] in t.nodes[up].deps


@pytest.mark.parametrize("norms", [1, 2])
def test_userbuffers_fuse_only_the_forward_gathers(norms: int) -> None:
    """tp_comm_overlap (docs/operator-model.md, "Parallel blocks"): the forward gathers feed qkv (and mlp_up
    with two norms) and run as ring exchanges; the backward gather of the output gradient feeds the branch
    sum's backward, not a GEMM, and the forward reduce-scatter follows the branch sum: neither is fused,
    where the sequential block fuses both of its forward reduce-scatters and its output-gradient gathers."""
    from rapidllm.engine.tp_overlap import overlap_durations
    from rapidllm.graph.templates import compute_durations

    def fused(c: Case) -> dict[str, list[tuple[str, str]]]:
        ops, out = price_case(c), {}
        for t in case_templates(c, ops):
            if t.section == "layer_dense":
                done = overlap_durations(t, compute_durations(ops, t), lambda axis, op, nb: 1e-4, 4, 132)
                out[t.part] = [(t.nodes[i].op, next(n.name for n in t.nodes if i in n.deps)) for i in sorted(done)]
        return out
    par = fused(case(model("parallel", norms), 4, True, tp_comm_overlap=True))
    assert par == {"fwd": [("all_gather", "qkv")] + [("all_gather", "mlp_up")] * (norms == 2), "bwd": []}
    seq = fused(case(model("sequential"), 4, True, tp_comm_overlap=True))
    assert seq == {"fwd": [("all_gather", "qkv"), ("reduce_scatter", "residual1"), ("all_gather", "mlp_up"),
                           ("reduce_scatter", "residual2")],
                   "bwd": [("all_gather", "mlp_down_dgrad"), ("all_gather", "o_proj_dgrad")]}


def shard(tp: int, sp: bool) -> Shard:
    return Shard(tokens=2048, batch=1, q_len=2048, kv_len=2048, tp=tp, sp=sp, ep=1, dtype_bytes=2, etp=tp,
                 causal=True)


@pytest.mark.parametrize("norms", [1, 2])
def test_same_gemms_and_attention(norms: int) -> None:
    """The two forms run the same GEMM shapes and attention (forward, recompute, backward): FLOPs of the
    matmuls identical; the pointwise work differs by the norms only (one fewer with one norm)."""
    seq = ModelSpec.from_mapping(model("sequential"), "test")
    par = ModelSpec.from_mapping(model("parallel", norms), "test")
    for tp, sp in ((1, False), (4, False), (4, True)):
        a = layer_training(seq, shard(tp, sp), False, "selective")
        b = layer_training(par, shard(tp, sp), False, "selective")
        for kind in (GEMM, ATTENTION):
            assert sorted((o.name, o.flops, o.gemm) for o in a if o.kind == kind) == \
                sorted((o.name, o.flops, o.gemm) for o in b if o.kind == kind)
        norm_flops = [o.flops for o in a if o.name == "norm2" and o.phase == "fwd"][0]
        pointwise = sum(o.flops for o in a if o.phase == "fwd" and o.kind not in (GEMM, ATTENTION))
        pointwise_par = sum(o.flops for o in b if o.phase == "fwd" and o.kind not in (GEMM, ATTENTION))
        # the branch sum runs at the unreduced width: (1 - 1/tp) of a residual more under SP
        extra_add = 2048 * 2048 * (1 - 1 / tp) if sp else 0.0
        assert pointwise_par == pytest.approx(pointwise - (2 - norms) * norm_flops + extra_add)


@pytest.mark.parametrize("tp,sp", [(1, False), (4, False), (4, True)])
def test_stored_activations_closed_form(tp: int, sp: bool) -> None:
    """Backward keeps per layer: the layer input (norm), the norm output(s) (the GEMMs' inputs), Q/K/V, the
    attention output, the MLP intermediate tensors. A parallel block has no residual1 to keep for a second
    norm, and with one norm no second norm output: (3 - norms) norm-width tensors fewer, s·b·h·2 / (tp under
    SP) bytes each. The branches' partial sums are full width and live from the output projection to the
    branch sum, where the output projection's, the MLP's and their sum are alive at once (plus the rotary
    output, which nothing reads): the parallel forward's transient peak."""
    width = 2048 * 2048 * 2.0
    unit = width / (tp if sp else 1)
    seq = layer_liveness(layer_forward(ModelSpec.from_mapping(model("sequential"), "test"), shard(tp, sp), False))
    for norms in (1, 2):
        ops = layer_forward(ModelSpec.from_mapping(model("parallel", norms), "test"), shard(tp, sp), False)
        par = layer_liveness(ops)
        assert seq.stored - par.stored == pytest.approx((3 - norms) * unit)
        rope = next(o.out_bytes for o in ops if o.name == "rope")
        assert par.forward_peak == pytest.approx(3 * width + rope)


def test_deep_model_needs_fewer_activation_bytes() -> None:
    """Over a whole step the stored tensors dominate: GPT-J's 28 layers at tp 4 with SP keep 2 norm widths a
    layer fewer, far more than the one-layer transient of the branch sums."""
    gptj = dict(name="gptj-shapes", hidden=4096, layers=28, heads=16, ffn=16384, vocab=50400, mlp="plain",
                norm="layernorm", bias=True, max_seq_len=2048)
    seq = rapidllm.predict(case(model("sequential", shape=gptj), 4, True))
    par = rapidllm.predict(case(model("parallel", 1, gptj), 4, True))
    assert par.memory.activations < seq.memory.activations


def random_shapes(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        heads = rng.choice([8, 16, 32])
        hidden = heads * rng.choice([64, 128])
        out.append(dict(name=f"r{i}", hidden=hidden, layers=rng.randint(1, 3), heads=heads,
                        kv_heads=rng.choice([heads, max(heads // 4, 4)]), ffn=hidden * rng.choice([2, 4]),
                        vocab=rng.choice([32000, 50400]), mlp=rng.choice(["plain", "gated"]), norm="layernorm",
                        max_seq_len=8192))
    return out


@pytest.mark.parametrize("shape", random_shapes(8), ids=lambda s: s["name"])
def test_parallel_never_slower_on_an_idle_network(shape: dict[str, Any]) -> None:
    """Same work, fewer TP bytes, the MLP no longer waiting on attention's collective: a parallel block is
    never slower than the sequential one of the same shapes (training with and without SP, prefill and
    decode), and never exposes more TP communication."""
    rng = random.Random(shape["name"])
    tp = rng.choice([2, 4])
    train = dict(TRAIN, seq_len=rng.choice([1024, 4096]), micro_batch=rng.choice([1, 2]), global_batch=4)
    infer = dict(INFER, batch=rng.choice([1, 8]), prompt_tokens=rng.choice([128, 1024]))
    for norms in (1, 2):
        for workload, sp in ((train, False), (train, True), (infer, False)):
            seq = rapidllm.predict(case(model("sequential", shape=shape), tp, sp, workload))
            par = rapidllm.predict(case(model("parallel", norms, shape), tp, sp, workload))
            keys = ("step_time_s",) if workload is train else ("ttft_s", "itl_s", "e2e_latency_s")
            for key in keys:
                assert getattr(par, key) <= getattr(seq, key) * (1 + 1e-12), (key, norms, sp)
            assert par.exposed_comm_s <= seq.exposed_comm_s * (1 + 1e-12) + 1e-12


def test_parallel_model_library() -> None:
    """The parallel-block models: GPT-J and Falcon-7B share one norm, Falcon-40B/180B and GPT-NeoX-20B have
    one per branch, and none is MoE."""
    from rapidllm.spec.named import resolve_named

    norms = {"gpt-j-6b": 1, "falcon-7b": 1, "falcon-40b": 2, "falcon-180b": 2, "gpt-neox-20b": 2}
    for name, n in norms.items():
        m = ModelSpec.from_mapping(*resolve_named("model", name, "test", "model"))
        assert (m.block, m.parallel_norms, m.moe, m.norms_per_layer) == ("parallel", n, None, n), name
