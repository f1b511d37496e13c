"""Network simulator vs nccl-tests all-reduce on 8x A100 NVSwitch (validation/references)."""
import pytest

from rapidllm.network.validation import A100_NVLINK_UTILIZATION, REFERENCE, mape, nccl_a100_rows


def test_reference_copy_present():
    assert REFERENCE.exists()


def test_nccl_a100_mape_at_least_1mib_within_15_percent():
    rows = nccl_a100_rows()
    assert len(rows) == 20
    assert mape(rows) <= 15.0
    big = [r for r in rows if r.nbytes >= 1 << 30]
    assert all(abs(r.error) < 0.05 for r in big)                # bandwidth regime: one utilization constant
    assert big[-1].predicted_busbw == pytest.approx(300e9 * A100_NVLINK_UTILIZATION, rel=0.03)
