"""`rapidllm validate`'s footer: the overall MAPE is errors.csv's `overall` line (validate.metrics), and the
suites outside it are named, so an extension suite's error is not read as the model's (user trial #5)."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from conftest import ROOT
from rapidllm.cli import main
from rapidllm.cli.validate import footer


def _rows(suite: str, in_overall: bool, pairs: list[tuple[float, float]], basis: str = "both") -> list[dict]:
    return [{"suite": suite, "group": suite, "in_overall": in_overall, "row": i, "label": str(i),
             "metric": "step_time_s", "basis": basis, "calibration": False, "measured": m, "predicted": p,
             "status": "ok", "reason": "", "error_pct": 100 * (p - m) / m} for i, (p, m) in enumerate(pairs)]


def test_footer_pools_only_suites_in_overall_and_names_the_rest() -> None:
    rows = pd.DataFrame(_rows("a", True, [(1.1, 1.0), (0.7, 1.0)])          # +10%, -30%
                        + _rows("b", True, [(2.0, 2.0)])                        # 0%
                        + _rows("ext", False, [(10.0, 1.0)])                    # +900%, held out
                        + _rows("alt", False, [(1.0, 2.0)]))
    overall, held = footer(rows, every_suite=True)
    # (10 + 30 + 0) / 3 on both bases (no suite scores a paper-only metric); the 900% row is not in it
    assert "paper basis 13.33% (3 rows)" in overall and "full basis 13.33% (3 entries)" in overall
    assert "suites with in_overall" in overall and "paper reports 10.0%" in overall
    assert held.endswith(": alt, ext") and "docs/validation.md" in held


def test_footer_counts_paper_rows_and_full_entries_apart() -> None:
    """A NIM-style row scores three full-basis metrics and one paper-basis metric."""
    rows = pd.DataFrame(_rows("nim", True, [(1.2, 1.0)], "paper") + _rows("nim", True, [(1.0, 1.0)] * 3, "full"))
    rows["row"] = 0
    (overall,) = footer(rows, every_suite=False)
    assert "paper basis 20.00% (1 rows)" in overall and "full basis 0.00% (3 entries)" in overall
    assert "suites run here" in overall


def test_cli_footer_agrees_with_the_suite_line(tmp_path, capsys) -> None:
    suite = ROOT / "validation" / "suites" / "llama2_latency_a100.yaml"
    assert main(["validate", str(suite), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    suite_all = float(re.search(r" all .*MAPE\s+([\d.]+)%", next(l for l in out if " all " in l))[1])
    overall = re.search(r"paper basis ([\d.]+)% \((\d+) rows\)", out[-1])
    assert overall and float(overall[1]) == pytest.approx(suite_all, abs=0.006)
    assert int(overall[2]) == len(pd.read_csv(tmp_path / "llama2_latency_a100.csv").query("status == 'ok'"))
    assert "not in overall" not in "\n".join(out)
