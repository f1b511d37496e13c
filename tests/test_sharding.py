"""ZeRO-3 (DeepSpeed) and FSDP full_shard carry the same per-layer bytes in different numbers of
collectives (engine/sharding.py): FSDP one all-gather and one reduce-scatter per wrapped block, DeepSpeed
one all-gather per module holding weights and reduce-scatters in 5e8-element buckets. Either way the
collectives that overlap a layer's compute hold NCCL's channels' SMs, which the compute then runs without."""
import numpy as np
import pytest

from rapidllm.engine import composer
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import sharded_layer_bytes, sharded_layer_params
from rapidllm.engine.sharding import (
    DS_REDUCE_BUCKET,
    NCCL_NODE_CHANNELS,
    gather_groups,
    layer_comm_seconds,
    nccl_channels,
    nccl_sm_share,
    overlapped_layer_seconds,
    scatter_groups,
)
from rapidllm.graph.templates import layer_counts
from rapidllm.ops.price import price_case
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


def test_overlapped_layer_closed_form():
    """Compute beside a collective holding a share s of the SMs runs at 1 - s: a layer of span 10 (compute
    8) beside a 4-unit gather at s = 0.25 is delayed by 0.25 x 4 (the compute outlasts the gather); beside a
    40-unit gather the compute all runs beside it and the gather bounds the layer."""
    assert overlapped_layer_seconds(10.0, 8.0, 4.0, 0.25) == pytest.approx(11.0)
    assert overlapped_layer_seconds(10.0, 8.0, 40.0, 0.25) == pytest.approx(40.0)
    # 8 / 0.75 = 10.67 of compute beside an 11-unit gather, then the 2 units of the span that are not compute
    assert overlapped_layer_seconds(10.0, 8.0, 11.0, 0.25) == pytest.approx(8.0 / 0.75 + 2.0)
    assert overlapped_layer_seconds(10.0, 8.0, 4.0, 0.0) == max(10.0, 4.0)


def test_overlap_never_faster_and_monotone_in_share():
    rng = np.random.default_rng(7)
    compute = rng.uniform(0.0, 5.0, 500)
    span = compute + rng.uniform(0.0, 2.0, 500)
    comm = rng.uniform(0.0, 10.0, 500)
    previous = overlapped_layer_seconds(span, compute, comm, 0.0)
    assert np.array_equal(previous, np.maximum(span, comm))
    for share in (0.05, 0.12, 0.2, 0.5):
        t = overlapped_layer_seconds(span, compute, comm, share)
        assert np.all(t >= previous) and np.all(t >= comm)
        # never more than the whole collective at the share, nor than running the two back to back
        assert np.all(t <= np.maximum(span, comm) + share * comm + 1e-12)
        assert np.all(t <= span + comm + 1e-12)
        previous = t


def _layout(hardware: str, network: str, tp: int, dp: int):
    return resolve_case({"model": TINY, "hardware": hardware, "network": network,
                         "workload": {"mode": "training", "seq_len": 1024, "global_batch": dp, "micro_batch": 1},
                         "parallelism": {"tp": tp, "dp": dp, "fsdp": "full_shard"}}, "test")


@pytest.mark.parametrize("hardware,network,tp,dp,channels", [
    ("h100-sxm5-80gb", "superpod-ndr", 1, 8, NCCL_NODE_CHANNELS),   # one node: NVLink channels
    ("h100-sxm5-80gb", "superpod-ndr", 1, 32, 2 * 8),       # 8 NICs at 48 GB/s: sm_90 keeps > 4 channels
    ("h100-sxm5-80gb", "superpod-ndr", 2, 16, 2 * 2 * 4),   # 4 NICs: duplicated, then doubled
    ("h100-sxm5-80gb", "superpod-ndr", 8, 4, 2 * 2 * 1),    # tp fills the node: dp on one NIC per node
    ("a100-sxm4-80gb", "superpod-hdr", 1, 16, 2 * 8),       # 24 GB/s channels are never duplicated
    ("a100-sxm4-80gb", "superpod-hdr", 8, 4, 2 * 1),
    ("a100-sxm4-80gb", "superpod-ndr", 1, 16, 2 * 2 * 8),   # sm_80 duplicates 48 GB/s channels whatever their count
    ("b200", "superpod-b200-ndr", 1, 16, 2 * 8),            # 50 GB/s NICs: 48 GB/s steps, as Hopper
], ids=["h100-node", "h100-8nic", "h100-tp2", "h100-tp8", "a100-8nic", "a100-tp8", "a100-ndr", "b200-8nic"])
def test_nccl_channels_from_the_groups_nics(hardware, network, tp, dp, channels):
    """Inside a node NCCL's 24 NVLink channels; across nodes one ring channel per NIC the DP group's GPUs bring
    to a node, duplicated when a channel runs at >= 25 GB/s (not on sm > 80 below 50 GB/s with more than 4),
    then doubled; the share is the channels over the SMs."""
    case = _layout(hardware, network, tp, dp)
    cost = CommCost(case)
    assert nccl_channels(case, cost) == channels
    assert nccl_sm_share(case, cost) == pytest.approx(channels / case.hardware.sm_count)


def test_step_pays_the_gathers_share_of_sms(monkeypatch):
    """The whole step: at least the step without the SM share, and at most that plus the share of every
    overlapped per-layer collective (two gathers and a reduce-scatter per layer and micro-batch)."""
    case = resolve_case({"model": TINY, "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
                         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 512, "micro_batch": 8},
                         "parallelism": {"dp": 32, "fsdp": "full_shard"}}, "test")    # compute outlasts gathers
    with_share = evaluate(case)
    monkeypatch.setattr(composer, "nccl_sm_share", lambda case, cost: 0.0)
    without = evaluate(case)
    gather, scatter = sharded_layer_bytes(case)
    g, rs = layer_comm_seconds(case, CommCost(case), -1, gather, scatter, sharded_layer_params(case))
    m = case.workload.microbatches(case.parallelism.dp)
    bound = nccl_sm_share(case, CommCost(case)) * (2 * g + rs) * case.model.layers * m
    assert with_share["compute_time_s"] == without["compute_time_s"]
    assert without["step_time_s"] < with_share["step_time_s"] <= without["step_time_s"] + bound + 1e-12


TINY_MOE = {**TINY, "name": "tiny-moe",
            "moe": {"experts": 8, "top_k": 2, "expert_ffn": 1024, "first_dense_layers": 1, "layer_freq": 1}}


@pytest.mark.parametrize("model,parallelism,faults", [
    (TINY_MOE, {"pp": 2, "dp": 16, "ep": 4, "zero": 3}, [{"link": [1, 32], "bandwidth_factor": 0.25}]),
    (TINY, {"pp": 2, "dp": 8, "fsdp": "full_shard", "schedule": "interleaved", "virtual_stages": 3,
            "embedding_in_split": True, "loss_in_split": True}, []),
], ids=["moe-faulty-stages", "empty-chunks"])
def test_share_per_stage_and_chunk(monkeypatch, model, parallelism, faults):
    """Stages that differ (a degraded link: every stage priced on its own) and chunks without layers (4 layers
    with the embedding and loss in a 2 x 3 split: the first and last chunks hold none): every chunk's span
    is finite and at least its span without the share, a chunk without layers exactly that (nothing
    overlaps in it), and the compute is the same."""
    case = resolve_case({"model": model, "hardware": "h100-sxm5-80gb", "network": "superpod-ndr", "faults": faults,
                         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 1024, "micro_batch": 16},
                         "parallelism": parallelism}, "test")

    def inputs():
        return composer.training_plan(case, price_case(case), CommCost(case)).inputs
    with_share = inputs()
    monkeypatch.setattr(composer, "nccl_sm_share", lambda case, cost: 0.0)
    without = inputs()
    assert CommCost(case).symmetric == (not faults)
    empty = np.array(case.parallelism.stage_chunk_layers(case.model.layers)) == 0
    assert empty.any() == (not faults)
    for a, b in ((with_share.f_span, without.f_span), (with_share.b_span, without.b_span)):
        assert np.isfinite(a).all() and (a >= b).all() and (a > b).any()
        assert (a[empty] == b[empty]).all()
    assert np.array_equal(with_share.f_compute, without.f_compute)
    assert np.array_equal(with_share.b_compute, without.b_compute)


def test_a_chunk_of_two_layer_kinds_exposes_one_gather():
    """DeepSeek-V2-Lite (one dense layer, 26 MoE layers) under full_shard: the forward of its only chunk
    is its layers, each beside the next one's gather, plus ONE exposed gather (the chunk's first),
    whatever the number of layer kinds."""
    case = resolve_case({"model": "deepseek-v2-lite", "hardware": "h100-sxm5-80gb", "network": "superpod-ndr",
                         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 64, "micro_batch": 1},
                         "parallelism": {"dp": 16, "fsdp": "full_shard"}}, "test")
    cost = CommCost(case)
    plan = composer.training_plan(case, price_case(case), cost)
    gather, scatter = sharded_layer_bytes(case)
    g, rs = layer_comm_seconds(case, cost, 0, gather, scatter, sharded_layer_params(case))
    share, r = nccl_sm_share(case, cost), plan.replayed[0]
    counts = layer_counts(case)
    assert len(counts) == 2
    layers_f = sum(n * overlapped_layer_seconds(r.span(k, "fwd"), r.compute(k, "fwd"), g, share)
                   for k, n in counts.items())
    layers_b = sum(n * overlapped_layer_seconds(r.span(k, "bwd"), r.compute(k, "bwd"), g + rs, share)
                   for k, n in counts.items())
    extra_f = r.span("first_stage", "extra_fwd") + r.span("last_stage", "extra_fwd")
    extra_b = r.span("first_stage", "extra_bwd") + r.span("last_stage", "extra_bwd")
    assert plan.inputs.f_span[0, 0] - layers_f - extra_f == pytest.approx(g, rel=1e-9)
    assert plan.inputs.b_span[0, 0] - layers_b - extra_b == pytest.approx(g + rs, rel=1e-9)
