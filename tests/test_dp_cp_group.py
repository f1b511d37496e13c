"""Gradients are reduced over dp x cp ranks (Megatron-Core's data-parallel group with context parallelism):
CP ranks hold the same weights, each the gradient of its part of the sequence."""
from __future__ import annotations

from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import gradient_buckets
from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.spec.case import Case, resolve_case


def llama8b(tp: int, cp: int, dp: int, pp: int = 1) -> Case:
    return resolve_case(dict(model="llama3.1-8b", hardware="h100-sxm5-80gb", network="superpod-ndr", precision="bf16",
                             workload=dict(mode="training", seq_len=32768, global_batch=8 * dp, micro_batch=1),
                             parallelism=dict(tp=tp, cp=cp, dp=dp, pp=pp, sp=True, zero=1)), "test")


def test_gradient_group_is_dp_times_cp() -> None:
    case = llama8b(tp=8, cp=2, dp=2, pp=2)
    cost = CommCost(case)
    assert cost.group_size("dp") == 4
    assert cost.groups("dp", 0)[:2] == [(0, 8, 16, 24), (1, 9, 17, 25)]
    assert cost.groups("dp", 1)[0] == (32, 40, 48, 56)
    everyone = sorted(r for g in cost.groups("dp") for r in g)
    assert everyone == list(range(64))


def test_cp_without_dp_still_reduces_and_gathers() -> None:
    """dp 1, cp 16 across 16 nodes: the gradient reduce-scatter and ZeRO-1's parameter all-gather run over
    the 16 CP ranks (before: none at all, while memory already sharded the optimizer over them). The
    gather moves 15/16 of the stage's weights through each GPU's 400 Gb/s NIC: at least that time at the
    device's network utilization, and within 1.5x of it."""
    case = llama8b(tp=8, cp=16, dp=1)
    ops = {(n.axis, n.op) for n in communication_nodes(case)}
    assert ("dp", "reduce_scatter") in ops or ("dp", "all_reduce") in ops
    plan = gradient_buckets(case, 1)
    assert plan.op == "reduce_scatter" and plan.sharded and plan.gather_bytes > 0
    nic = 50e9 * case.hardware.utilization.network
    t = CommCost(case).time("dp", "all_gather", plan.gather_bytes)
    closed = 15 / 16 * plan.gather_bytes / nic
    assert closed < t < 1.5 * closed
