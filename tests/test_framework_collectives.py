"""Framework-specific collectives: TensorRT-LLM's NVLink custom all-reduce vs NCCL rings (engine/comm_cost.py)."""
import pytest

from rapidllm.engine.comm_cost import CommCost
from rapidllm.spec.case import resolve_case

BASE = {"hardware": "a100-sxm4-80gb", "network": "dgx-a100", "model": "llama2-7b", "precision": "fp16",
        "workload": {"mode": "inference", "prompt_tokens": 200, "output_tokens": 200}, "parallelism": {"tp": 8}}


def _cost(framework: str) -> tuple[CommCost, float, float, float, float]:
    case = resolve_case({**BASE, "framework": framework}, "test")
    dim = case.network.dimensions[0]
    return (CommCost(case), dim.link_bandwidth * case.hardware.utilization.network, dim.latency_s,
            dim.collective_latency_s, case.hardware.launch_overhead_s)


@pytest.mark.parametrize("nbytes", [16384.0, float(1 << 20)])
def test_single_chunk_closed_forms(nbytes):
    """One chunk per transfer through a switch (two hops, store and forward). NCCL ring: the network's
    per-call base latency c, then 2(n-1) steps of 2(a + S/(nB)); TensorRT-LLM direct (its own kernel, no
    NCCL base): two phases, each n-1 pieces of S/n back to back on a rank's uplink plus the last piece's
    downlink hop: 2(S/B + 2a). Both pay one kernel launch L."""
    n = 8
    ring, b, a, c, launch = _cost("megatron")
    direct, _, _, _, _ = _cost("tensorrt-llm")
    assert c > 0
    assert ring.time("tp", "all_reduce", nbytes) == pytest.approx(
        c + 2 * (n - 1) * 2 * (a + nbytes / (n * b)) + launch, rel=1e-9)
    assert direct.time("tp", "all_reduce", nbytes) == pytest.approx(2 * (nbytes / b + 2 * a) + launch, rel=1e-9)


@pytest.mark.parametrize("nbytes", [4096.0, 65536.0, float(16 << 20), float(256 << 20)])
def test_custom_all_reduce_never_slower_than_the_ring(nbytes):
    ring, _, _, _, _ = _cost("megatron")
    direct, _, _, _, _ = _cost("tensorrt-llm")
    assert direct.time("tp", "all_reduce", nbytes) <= ring.time("tp", "all_reduce", nbytes)


def test_only_all_reduce_changes():
    ring, _, _, _, _ = _cost("megatron")
    direct, _, _, _, _ = _cost("tensorrt-llm")
    for op in ("all_gather", "reduce_scatter"):
        assert direct.time("tp", op, 1e6) == ring.time("tp", op, 1e6)
