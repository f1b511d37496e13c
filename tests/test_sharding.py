"""ZeRO-3 (DeepSpeed) and FSDP full_shard carry the same per-layer bytes in different numbers of
collectives (engine/sharding.py): FSDP one all-gather and one reduce-scatter per wrapped block, DeepSpeed
one all-gather per module holding weights and reduce-scatters in 5e8-element buckets."""
import pytest

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import sharded_layer_bytes, sharded_layer_params
from rapidllm.engine.sharding import DS_REDUCE_BUCKET, gather_groups, layer_comm_seconds, scatter_groups
from rapidllm.prediction import evaluate
from rapidllm.spec.case import resolve_case

TINY = {"name": "tiny", "hidden": 1024, "layers": 4, "heads": 8, "kv_heads": 8, "ffn": 4096, "vocab": 8000,
        "mlp": "gated", "position": "rope", "norm": "rmsnorm", "tied_embeddings": True, "max_seq_len": 2048}


def _case(sharding: dict):
    return resolve_case({"model": TINY, "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
                         "workload": {"mode": "training", "seq_len": 1024, "global_batch": 32, "micro_batch": 1},
                         "parallelism": {"dp": 32, **sharding}}, "test")


def test_collective_counts():
    fsdp, ds = _case({"fsdp": "full_shard"}), _case({"zero": 3})
    assert gather_groups(fsdp) == 1.0 and scatter_groups(fsdp, 1e9) == 1.0
    assert gather_groups(ds) == 4.0                        # qkv, o_proj, mlp_up (gate fused), mlp_down
    params = sharded_layer_params(ds)
    assert scatter_groups(ds, params) == pytest.approx(params / DS_REDUCE_BUCKET)
    assert sharded_layer_bytes(ds) == sharded_layer_bytes(fsdp)


def test_deepspeed_pays_a_latency_per_module():
    fsdp, ds = _case({"fsdp": "full_shard"}), _case({"zero": 3})
    gather, scatter = sharded_layer_bytes(ds)
    params = sharded_layer_params(ds)
    g_ds, _ = layer_comm_seconds(ds, CommCost(ds), -1, gather, scatter, params)
    g_fsdp, _ = layer_comm_seconds(fsdp, CommCost(fsdp), -1, gather, scatter, params)
    cost = CommCost(ds)
    assert g_ds == pytest.approx(4 * cost.time("dp", "all_gather", gather / 4))
    assert g_ds > g_fsdp                                   # same bytes, four calls' latency
    r_ds, r_fsdp = evaluate(ds), evaluate(fsdp)
    assert r_ds["compute_time_s"] == pytest.approx(r_fsdp["compute_time_s"])
    assert r_ds["step_time_s"] >= r_fsdp["step_time_s"]
