"""Network simulator vs nccl-tests all-reduce on 8x A100 NVSwitch (validation/references)."""
import pytest

from rapidllm.network.validation import REFERENCE, a100_network_utilization, mape, nccl_a100_rows
from rapidllm.validate.calibrate import collective_calibration_rows, fit_network_on_collectives


def test_reference_copy_present():
    assert REFERENCE.exists()


def test_frozen_constant_is_the_fit_on_the_declared_calibration_rows():
    assert a100_network_utilization() == pytest.approx(fit_network_on_collectives("a100-sxm4-80gb"), abs=5e-4)


def test_nccl_a100_held_out_mape_at_least_1mib_within_15_percent():
    rows = nccl_a100_rows(a100_network_utilization())
    assert len(rows) == 20
    calibration = collective_calibration_rows(rows)
    assert len(calibration) == 4                                   # 25 % of the 15 rows >= 1 MiB
    held_out = [r for r in rows if r.nbytes >= 1 << 20 and r not in calibration]
    assert mape(held_out) <= 15.0                                  # measured 14.2 % (all 15 rows: 15.3 %)
    # bandwidth regime (>= 1 GiB): one constant governs every size, so the errors move together
    # (measured +17.8 % .. +20.8 %: the constant fitted on four sizes sits below NCCL's asymptote)
    big = [r.error for r in rows if r.nbytes >= 1 << 30]
    assert max(big) - min(big) < 0.05


def test_simulated_bus_bandwidth_follows_the_constant():
    """Large messages approach utilization x 300 GB/s less the store-and-forward share of 4 chunks."""
    u = a100_network_utilization()
    slow, fast = nccl_a100_rows(u)[-1], nccl_a100_rows(min(1.0, 1.2 * u))[-1]
    assert fast.predicted_busbw == pytest.approx(1.2 * slow.predicted_busbw, rel=0.01)
    assert slow.predicted_busbw < 300e9 * u
