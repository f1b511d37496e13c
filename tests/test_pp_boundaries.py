"""Each pipeline boundary is priced on the links its sends take: stages of a fault-free fabric are alike, but
their boundaries need not be (stage sizes that do not fill a node), and the interleaved schedule's last stage
sends to the first."""
from __future__ import annotations

from rapidllm.engine.comm_cost import CommCost
from rapidllm.spec.case import Case, resolve_case

SEND = 16 * 2**20


def case(tp: int, pp: int, faults: list | None = None) -> Case:
    return resolve_case(dict(model="llama3.1-8b", hardware="h100-sxm5-80gb", network="superpod-ndr",
                             faults=faults or [], precision="bf16",
                             workload=dict(mode="training", seq_len=8192, global_batch=16, micro_batch=1),
                             parallelism=dict(tp=tp, pp=pp, dp=1, sp=True, schedule="interleaved",
                                              virtual_stages=2)), "test")


def test_boundaries_that_leave_the_node_take_infiniband() -> None:
    """tp 4 on 8-GPU nodes: stages 0|1 share a node (NVLink), 1|2 do not (a 400 Gb/s NIC per GPU)."""
    c = case(tp=4, pp=8)
    cost = CommCost(c)
    nic = SEND / (50e9 * c.hardware.utilization.network)
    inside, across = (cost.time("pp", "send_recv", SEND, s) for s in (0, 1))
    assert across >= nic > 4 * inside
    assert cost.time("pp", "send_recv", SEND, 2) == inside and cost.time("pp", "send_recv", SEND, 5) == across
    assert cost.time("pp", "send_recv", SEND, 7) == across        # the wrap-around 7 -> 0 leaves node 3


def test_wrap_around_send_is_priced_under_faults() -> None:
    """A fault breaks the stages' symmetry, so each boundary is simulated on its own: the last stage's send
    to stage 0 (interleaved) was given no ranks and cost one kernel launch."""
    healthy = CommCost(case(tp=8, pp=4))
    faulty = CommCost(case(tp=8, pp=4, faults=[{"link": [24, 35], "bandwidth_factor": 0.9}]))
    assert not faulty.symmetric
    wrap = faulty.time("pp", "send_recv", SEND, 3)
    assert wrap == healthy.time("pp", "send_recv", SEND, 3) == healthy.time("pp", "send_recv", SEND, 0)
    assert wrap > SEND / (50e9 * 0.65)


def test_inference_pass_sums_its_own_boundaries() -> None:
    """A forward pass crosses every boundary once, each at its own price: with tp 4, stages 1|2 are on
    two nodes (before, (pp - 1) x boundary 0|1's NVLink send)."""
    import rapidllm
    p = rapidllm.predict(dict(model="llama3.1-8b", hardware="h100-sxm5-80gb", network="superpod-ndr",
                              precision="bf16", parallelism=dict(tp=4, pp=4),
                              workload=dict(mode="inference", batch=8, prompt_tokens=2048, output_tokens=2)),
                         trace=True)
    sends = p.schedule.prefill.sends
    nbytes = p.schedule.prefill.send_bytes
    assert len(sends) == 3 and sends[0] == sends[2] and sends[1] > nbytes / (50e9 * 0.65) > 4 * sends[0]
