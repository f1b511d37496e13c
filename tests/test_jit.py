"""Lazy kernels (rapidllm/jit.py): a kernel run as plain Python gives the numbers numba gives, and the
single-case CLI path loads neither numba nor pandas."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from rapidllm import jit
from rapidllm.caches import Caches
from rapidllm.prediction import evaluate
from rapidllm.spec.case import load_case, resolve_case
from rapidllm.spec.paths import project_root


def _both_ways(case) -> tuple[dict, dict, int]:
    """evaluate() with every kernel compiled, and with every kernel interpreted; fresh memo tables each
    time, so every collective is simulated and every GEMM priced again. Also the interpreted work."""
    with Caches().active():
        compiled = evaluate(case)
    with Caches().active(), jit.interpret_budget(10**9):
        interpreted = evaluate(case)
        work = 10**9 - jit._budget
    return compiled, interpreted, work


def _variants(gpt_case: dict) -> list[dict]:
    par = gpt_case["parallelism"]
    wl = {**gpt_case["workload"], "global_batch": 32}
    return [
        {**gpt_case, "workload": wl, "parallelism": {**par, "pp": 4, "dp": 2, "schedule": "interleaved",
                                                     "virtual_stages": 2, "zero": 1}},
        {**gpt_case, "workload": wl, "parallelism": {**par, "pp": 4, "dp": 2, "zero": 3,
                                                     "recompute": "full"}},
        {**gpt_case, "workload": wl, "parallelism": {**par, "cp": 2, "schedule": "gpipe"}},
        {**gpt_case, "workload": {"mode": "inference", "batch": 4, "prompt_tokens": 512, "output_tokens": 64},
         "parallelism": {"tp": 8, "pp": 2}},
    ]


@pytest.mark.parametrize("which", range(4))
def test_interpreted_kernels_equal_compiled(gpt_case, which) -> None:
    compiled, interpreted, work = _both_ways(resolve_case(_variants(gpt_case)[which], "x"))
    assert compiled["status"] == "ok" and work > 0
    assert {k: repr(v) for k, v in interpreted.items()} == {k: repr(v) for k, v in compiled.items()}


def test_examples_interpreted_equal_compiled_within_budget() -> None:
    """The README's GPT-175B example fits the CLI's interpretation budget; the MoE serving example (EP
    all-to-all, generic event loop, H200 GEMM catalog) is equal too."""
    from rapidllm.cli.predict import INTERPRET_BUDGET
    for name in ("gpt175b-tp8-pp8.yaml", "deepseek-v3-8xh200-serving.yaml"):
        compiled, interpreted, work = _both_ways(load_case(project_root() / "examples" / name))
        assert {k: repr(v) for k, v in interpreted.items()} == {k: repr(v) for k, v in compiled.items()}, name
        if name.startswith("gpt175b"):
            assert work <= INTERPRET_BUDGET


def test_budget_runs_the_rest_compiled() -> None:
    """Past the budget a call runs compiled; nested kernels follow their caller."""
    from rapidllm.engine.replay import longest_path
    dur = np.arange(1.0, 7.0)
    ptr = np.array([0, 0, 1, 2, 3, 4, 5], dtype=np.int64)
    idx = np.arange(5, dtype=np.int64)
    expect = longest_path(dur, ptr, idx)
    with jit.interpret_budget(5):                 # the call's work is 6 + 7 + 5 = 18 > 5: compiled
        out = longest_path(dur, ptr, idx)
        assert jit._budget == 5
    with jit.interpret_budget(18):
        again = longest_path(dur, ptr, idx)
        assert jit._budget == 0
    for a, b, c in zip(expect, out, again):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_predict_cli_imports_neither_numba_nor_pandas() -> None:
    code = ("import sys, io, contextlib\nfrom rapidllm.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(['predict', 'examples/gpt175b-tp8-pp8.yaml', '--json'])\n"
            "print(rc, 'numba' in sys.modules, 'pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=project_root(),
                         env={**os.environ}, timeout=120)
    assert out.stdout.split() == ["0", "False", "False"], out.stderr
