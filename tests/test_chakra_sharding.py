"""The Chakra trace of a ZeRO-3 / FSDP full_shard step carries the sharded-layer collectives the engine
prices (engine/sharding.py): the same number of weight all-gathers, each of the engine's size, and the same
reduce-scatter bytes, placed as DeepSpeed or FSDP issue them (`sharding.scatter_calls`)."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from rapidllm.engine.chakra import rank_trace
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import sharded_layer_bytes, sharded_layer_params, training_plan
from rapidllm.engine.sharding import gather_groups, layer_collectives, scatter_calls, scatter_groups
from rapidllm.ops.price import price_case
from rapidllm.spec.case import resolve_case

TINY = {"name": "tiny", "hidden": 1024, "layers": 4, "heads": 8, "kv_heads": 8, "ffn": 4096, "vocab": 8000,
        "mlp": "gated", "position": "rope", "norm": "rmsnorm", "tied_embeddings": True, "max_seq_len": 2048}
TINY_MOE = {**TINY, "name": "tiny-moe",
            "moe": {"experts": 8, "top_k": 2, "expert_ffn": 1024, "first_dense_layers": 1, "layer_freq": 1}}
DP, MICRO = 8, 4


def _case(model: dict, sharding: dict):
    return resolve_case({"model": model, "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
                         "workload": {"mode": "training", "seq_len": 1024, "global_batch": DP * MICRO,
                                      "micro_batch": 1},
                         "parallelism": {"dp": DP, **sharding}}, "test")


def _traced(case):
    """Rank 0's trace and the collectives the engine counted for the step (`CommCost.uses`)."""
    cost = CommCost(case)
    ops = price_case(case)
    plan = training_plan(case, ops, cost)
    return rank_trace(case, ops, 0, plan), cost.uses


def _dp(nodes, op: str) -> list:
    return [n for n in nodes if n.name.endswith(f"dp.{op}") and not n.name.startswith("param_gather")]


def _action(n) -> str:
    return n.name.split(".")[0] + "." + n.name.split(".")[1]        # "F0.3" / "B0.3"


@pytest.mark.parametrize("model,sharding", [(TINY, {"zero": 3}), (TINY, {"fsdp": "full_shard"}),
                                            (TINY_MOE, {"zero": 3, "ep": 2})],
                         ids=["zero3", "full_shard", "zero3-moe"])
def test_weight_gathers_are_the_engines(model, sharding):
    """Every pass gathers each layer's weights in `gather_groups` calls of bytes / g: per pass as many calls
    as the engine prices for the stage, each of its size, the layer's bytes in all, and over the step
    exactly the engine's count."""
    case = _case(model, sharding)
    nodes, uses = _traced(case)
    gather_b, scatter_b = sharded_layer_bytes(case)
    (g, each), _ = layer_collectives(case, gather_b, scatter_b, sharded_layer_params(case))
    gathers = _dp(nodes, "all_gather")
    per_action = Counter(_action(n) for n in gathers)
    assert len(per_action) == 2 * MICRO                                    # a forward and a backward pass
    layers = case.model.layers
    assert set(per_action.values()) == {round(g * layers)}                  # 4 x 4 dense; 4 + 3 x 11 with the MoE mix
    assert {n.comm_size for n in gathers} == {round(each / DP)}             # one rank's input (ASTRA-sim)
    assert sum(n.comm_size * DP for n in gathers) == pytest.approx(2 * MICRO * layers * gather_b, rel=1e-6)
    assert len(gathers) == pytest.approx(uses[("dp", "all_gather", each)], rel=1e-12)
    if "fsdp" in sharding:
        assert g == 1
    else:
        assert g == (4.0 if "moe" not in model else (4 + 3 * 11) / 4)      # qkv, o, up, down; + router, 4+4 experts


@pytest.mark.parametrize("sharding", [{"zero": 3}, {"fsdp": "full_shard"}], ids=["zero3", "full_shard"])
def test_reduce_scatters_carry_the_engines_bytes(sharding):
    """FSDP reduce-scatters after every layer; DeepSpeed's 5e8-element bucket holds this whole model, so
    each backward pass flushes one partial bucket (the engine counts 4 x s of a full bucket's call)."""
    case = _case(TINY, sharding)
    nodes, uses = _traced(case)
    gather_b, scatter_b = sharded_layer_bytes(case)
    _, (s, bucket) = layer_collectives(case, gather_b, scatter_b, sharded_layer_params(case))
    scatters = _dp(nodes, "reduce_scatter")
    engine_calls = uses[("dp", "reduce_scatter", bucket)]
    assert engine_calls == pytest.approx(s * MICRO * case.model.layers)
    assert sum(n.comm_size for n in scatters) == pytest.approx(engine_calls * bucket, rel=1e-6)
    per_pass = Counter(_action(n) for n in scatters)
    assert set(per_pass) == {f"B0.{i}" for i in range(MICRO)}
    assert set(per_pass.values()) == {math.ceil(s * case.model.layers - 1e-9)}
    if "fsdp" in sharding:
        assert s == 1 and {n.comm_size for n in scatters} == {round(scatter_b)}
    else:
        assert s == pytest.approx(sharded_layer_params(case) / 5e8) and s * case.model.layers < 1
        assert {n.comm_size for n in scatters} == {round(case.model.layers * scatter_b)}


def test_deepspeed_buckets_fill_in_gradient_order():
    """A bucket of four layers' gradients: reduced after the fourth, the partial rest after the pass; a
    layer larger than a bucket reduces several; FSDP one call per layer of its own bytes."""
    ds, fsdp = _case(TINY, {"zero": 3}), _case(TINY, {"fsdp": "full_shard"})
    assert scatter_calls(ds, [1.0] * 8, 4.0) == [[], [], [], [4.0], [], [], [], [4.0]]
    assert scatter_calls(ds, [1.0] * 6, 4.0) == [[], [], [], [4.0], [], [2.0]]
    assert scatter_calls(ds, [2.5, 2.5], 1.0) == [[1.0, 1.0], [1.0, 1.0, 1.0]]
    assert scatter_calls(fsdp, [1.0, 0.5], 1.0) == [[1.0], [0.5]]
    # where a pass's layers fill whole buckets, the calls are the engine's layers x s
    params = 1.25e8
    (_, _), (s, bucket) = layer_collectives(ds, 1.0, 2.0 * params, params)
    calls = scatter_calls(ds, [2.0 * params] * 8, bucket)
    assert sum(map(len, calls)) == 8 * s == 8 * scatter_groups(ds, params) == 2
    assert gather_groups(ds) == 4.0
