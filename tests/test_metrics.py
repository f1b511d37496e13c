"""Error metrics against a hand-computed example."""
import numpy as np
import pandas as pd
import pytest

from rapidllm.validate.metrics import errors_table, mape, max_error, percentage_errors, time_weighted_mape


def test_metrics_hand_computed():
    predicted, measured = np.array([1.1, 1.8, 3.0]), np.array([1.0, 2.0, 4.0])
    # errors: +10%, -10%, -25% -> MAPE = 45/3 = 15%, max 25%, time-weighted = (0.1+0.2+1.0)/7 = 18.571%
    assert percentage_errors(predicted, measured) == pytest.approx([10.0, -10.0, -25.0])
    assert mape(predicted, measured) == pytest.approx(15.0)
    assert max_error(predicted, measured) == pytest.approx(25.0)
    assert time_weighted_mape(predicted, measured) == pytest.approx(100 * 1.3 / 7)


def test_errors_table_splits_groups_and_overall():
    rows = pd.DataFrame({
        "suite": ["a", "a", "a", "b", "b"], "group": ["g", "g", "g", "h", "h"],
        "in_overall": [True, True, True, False, False], "row": [0, 1, 1, 0, 1],
        "metric": ["x", "x", "y", "x", "x"], "calibration": [True, False, False, False, False],
        "measured": [1.0, 2.0, 4.0, 10.0, 10.0], "predicted": [1.1, 1.8, 3.0, 12.0, 9.0],
        "status": ["ok"] * 5})
    t = errors_table(rows).query("basis == 'full'").set_index(["scope", "name", "split"])
    assert t.loc[("suite", "a", "all"), "mape_pct"] == pytest.approx(15.0)
    assert t.loc[("suite", "a", "all"), "rows"] == 2 and t.loc[("suite", "a", "all"), "entries"] == 3
    assert t.loc[("suite", "a", "calibration"), "mape_pct"] == pytest.approx(10.0)
    assert t.loc[("suite", "a", "held_out"), "mape_pct"] == pytest.approx(17.5)
    assert t.loc[("metric", "a:y", "all"), "mape_pct"] == pytest.approx(25.0)
    assert t.loc[("overall", "overall", "all"), "mape_pct"] == pytest.approx(15.0)      # b is not in_overall
    assert t.loc[("all_suites", "all_suites", "all"), "mape_pct"] == pytest.approx((45 + 20 + 10) / 5)
    assert t.loc[("group", "h", "all"), "max_error_pct"] == pytest.approx(20.0)


def test_paper_basis_scores_only_its_entries():
    # suite a: two rows, full-basis metrics x (+10%, -10%) and y (-25% on row 1), paper-basis z (+4%, -2%);
    # suite b: one single-metric row (+20%) counted on both bases
    rows = pd.DataFrame({
        "suite": ["a"] * 5 + ["b"], "group": ["g"] * 6, "in_overall": [True] * 6, "row": [0, 1, 1, 0, 1, 0],
        "metric": ["x", "x", "y", "z", "z", "w"], "basis": ["full", "full", "full", "paper", "paper", "both"],
        "calibration": [True, False, False, True, False, False],
        "measured": [1.0, 2.0, 4.0, 10.0, 10.0, 5.0], "predicted": [1.1, 1.8, 3.0, 10.4, 9.8, 6.0],
        "status": ["ok"] * 6})
    t = errors_table(rows).set_index(["scope", "name", "basis", "split"])
    assert t.loc[("suite", "a", "full", "all"), "mape_pct"] == pytest.approx(15.0)
    assert t.loc[("suite", "a", "paper", "all"), "mape_pct"] == pytest.approx(3.0)
    assert t.loc[("suite", "a", "paper", "calibration"), "mape_pct"] == pytest.approx(4.0)
    assert t.loc[("group", "g", "full", "all"), "mape_pct"] == pytest.approx((10 + 10 + 25 + 20) / 4)
    assert t.loc[("group", "g", "paper", "all"), "mape_pct"] == pytest.approx((4 + 2 + 20) / 3)
    assert t.loc[("overall", "overall", "paper", "all"), "entries"] == 3
    assert t.loc[("metric", "a:z", "paper", "all"), "mape_pct"] == pytest.approx(3.0)
    assert ("suite", "b", "paper", "all") in t.index and t.loc[("suite", "b", "paper", "all"), "rows"] == 1


def test_accuracy_summary_figure_is_deterministic(tmp_path):
    from rapidllm.figures.accuracy import accuracy_summary
    rows = pd.DataFrame({
        "suite": ["a", "a", "b"], "group": ["inference_a100", "inference_a100", "training_dense_a100"],
        "in_overall": [True] * 3, "row": [0, 0, 0], "metric": ["x", "z", "w"], "basis": ["full", "paper", "both"],
        "calibration": [True, True, False], "measured": [1.0, 10.0, 5.0], "predicted": [1.1, 10.4, 6.0],
        "status": ["ok"] * 3})
    table = errors_table(rows)
    first = accuracy_summary(table, tmp_path / "one" / "acc")
    second = accuracy_summary(table, tmp_path / "two" / "acc")
    assert [p.suffix for p in first] == [".png", ".pdf"]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(first, second))
