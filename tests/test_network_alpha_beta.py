"""Alpha-beta closed forms (ring collectives)."""
import pytest

from rapidllm.network.alpha_beta import OPS, bus_bandwidth, collective_time


def test_ring_formulas():
    S, n, B, a = 1e9, 8, 100e9, 1e-6
    assert collective_time("all_reduce", S, n, B, a) == pytest.approx(2 * 7 / 8 * S / B + 14 * a)
    for op in ("reduce_scatter", "all_gather", "all_to_all"):
        assert collective_time(op, S, n, B, a) == pytest.approx(7 / 8 * S / B + 7 * a)
    assert collective_time("send_recv", S, n, B, a) == pytest.approx(S / B + a)
    assert collective_time("broadcast", S, n, B, a) == pytest.approx(S / B + 7 * a)


def test_single_rank_is_free_and_bad_input_raises():
    assert all(collective_time(op, 1e6, 1, 1e9, 1e-6) == 0 for op in OPS if op != "send_recv")
    with pytest.raises(ValueError, match="unknown collective"):
        collective_time("allreduce", 1, 2, 1, 0)
    with pytest.raises(ValueError):
        collective_time("all_reduce", 1, 2, 0, 0)


def test_bus_bandwidth_nccl_convention():
    alg, bus = bus_bandwidth("all_reduce", 8e9, 8, 1.0)
    assert alg == 8e9 and bus == pytest.approx(8e9 * 14 / 8)
