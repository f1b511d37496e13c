"""Devices without validation rows: the transfer rule, its statement in every hardware file, the warning and
flag on predictions, and the leave-one-out machinery (docs/transfer.md)."""
import dataclasses

import numpy as np
import pytest

from rapidllm.prediction import evaluate, predict, sweep
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.paths import project_root
from rapidllm.validate import transfer
from rapidllm.validate.calibrate import calibration_entries, fit_network_on_collectives
from rapidllm.validate.loo import suite_rows, transferred
from rapidllm.validate.suites import compare, load_suite

SUITES = sorted((project_root() / "validation" / "suites").glob("*.yaml"))
A100, H100 = "a100-sxm4-80gb", "h100-sxm5-80gb"


def test_rule_same_generation_first_then_nearest_capability():
    fitted = [A100, H100]
    assert transfer.donor("a100-sxm4-40gb", fitted) == A100        # sm_80, same die
    assert transfer.donor("h200", fitted) == H100                  # sm_90, same die
    assert transfer.donor("b200", fitted) == H100                  # sm_100: nearest is sm_90
    assert transfer.donor("gb200", fitted) == H100                 # GB200's B200 (sm_100), as b200
    assert transfer.donor("gb300", fitted) == H100                 # Blackwell Ultra (sm_103): nearest is sm_90
    assert transfer.donor("gb200", fitted + ["b200"]) == "b200"    # were B200 fitted: same sm_100 first
    assert transfer.donor("gb300", fitted + ["b200"]) == "b200"    # and the nearest capability to sm_103
    assert transfer.donor(A100, [H100]) == H100                    # leave-one-device-out partners
    assert transfer.donor(H100, [A100]) == A100
    assert transfer.donor("b200", [A100]) == A100
    assert transfer.donor(A100, []) is None


def test_every_device_has_rows_or_states_the_rule_and_carries_its_donors_constants():
    with_rows = set(calibration_entries([load_suite(p) for p in SUITES]))
    for device in transfer.devices():
        hw = transfer.device_spec(device)
        if device in with_rows:
            assert hw.validated, f"{device} has calibration rows but declares utilization_from"
            continue
        assert not hw.validated and hw.utilization_from != "datasheet", f"{device}: no rows and no stated rule"
        assert hw.utilization_from == transfer.donor(device, with_rows)
        assert hw.utilization == transfer.device_spec(hw.utilization_from).utilization


def test_a_declared_donor_the_rule_does_not_pick_is_rejected(monkeypatch):
    real = transfer.device_spec

    def lying(name):
        hw = real(name)
        return dataclasses.replace(hw, utilization_from=A100) if name == "h200" else hw
    monkeypatch.setattr(transfer, "device_spec", lying)
    with pytest.raises(SpecError, match="h200.*picks 'h100-sxm5-80gb'"):
        transfer.transferred_constants({})


CASE = {"model": "llama2-7b", "network": "dgx-h100", "precision": "bf16", "parallelism": {"tp": 1},
        "workload": {"mode": "inference", "batch": 1, "concurrency": 1, "prompt_tokens": 64, "output_tokens": 4}}


def test_prediction_on_a_device_without_rows_is_flagged_and_warns(capsys):
    from rapidllm import prediction
    prediction._WARNED.discard(("h200", H100))
    h200 = evaluate(resolve_case({**CASE, "hardware": "h200"}, "test"))
    assert h200["device_validated"] is False
    assert "device h200 has no validation rows of its own; constants transferred from h100-sxm5-80gb" \
        in capsys.readouterr().err
    evaluate(resolve_case({**CASE, "hardware": "h200"}, "test"))
    assert capsys.readouterr().err == ""                              # once per process
    h100 = predict({**CASE, "hardware": H100})
    assert h100.device_validated is True and "warning" not in capsys.readouterr().err
    # same die and constants, more HBM bandwidth: the H200 decodes faster than the H100
    assert h200["itl_s"] < h100.itl_s


def test_transferred_applies_the_own_microbenchmark_tables_unless_strict():
    fitted = {A100: np.array([0.7, 0.6, 0.78]), H100: np.array([0.5, 0.7, 0.65])}
    assert transfer.gemm_fraction(A100) == pytest.approx(0.980, abs=5e-4)     # model / measured kernel time
    assert transfer.gemm_fraction(H100) == pytest.approx(0.897, abs=5e-4)
    assert transfer.gemm_fraction("h200") is None
    # BabelStream Triad over the datasheet bandwidth, as published (validation/references/SOURCES.md)
    assert transfer.stream_fraction(A100) == pytest.approx(1.70e12 / 2.039e12)
    assert transfer.stream_fraction(H100) == pytest.approx(2.97e12 / 3.35e12)
    assert transfer.stream_fraction("h200") is None
    own = transfer.own_table_constants(A100)                   # no donor: the tables alone
    assert own == pytest.approx([round(transfer.gemm_fraction(A100), 3), round(transfer.stream_fraction(A100), 3),
                                 fit_network_on_collectives(A100)])
    assert transfer.own_table_constants("h200") is None
    u, note = transferred(A100, fitted, strict=False)
    assert u[0] == pytest.approx(round(0.5 * transfer.gemm_fraction(A100) / transfer.gemm_fraction(H100), 3))
    assert u[1] == pytest.approx(round(0.7 * transfer.stream_fraction(A100) / transfer.stream_fraction(H100), 3))
    assert u[2] == pytest.approx(fit_network_on_collectives(A100))
    assert "from h100-sxm5-80gb" in note and "own collective table" in note and "GEMM tables" in note
    assert "STREAM tables" in note
    u, note = transferred(A100, fitted, strict=True)
    assert u == pytest.approx([0.5, 0.7, 0.65]) and "collective" not in note


def test_suite_rows_with_the_files_constants_reproduce_validate_and_respond_to_them():
    suite = load_suite(project_root() / "validation" / "suites" / "llama2_latency_a100.yaml")
    hw = transfer.device_spec(A100).utilization
    frozen = np.array([hw.compute, hw.hbm, hw.network])
    rows = suite_rows(suite, {A100: frozen})
    reference = compare(suite, sweep(suite.experiment))
    assert rows.predicted.to_numpy() == pytest.approx(reference.predicted.to_numpy(), rel=1e-12)
    slower = suite_rows(suite, {A100: frozen * np.array([1.0, 0.5, 1.0])})
    assert (slower.predicted > rows.predicted).all()              # half the HBM fraction: every decode slower
