"""Uneven pipeline splits: the per-stage layer lists, the engine's slowest stage and the heaviest stage's memory."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from conftest import ROOT
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import training_plan
from rapidllm.engine.engine import training_record
from rapidllm.engine.replay import longest_path
from rapidllm.graph.pipeline_dag import PipelineInputs, build_pipeline
from rapidllm.memory.closed_form import closed_form_memory
from rapidllm.memory.model import memory_for_case
from rapidllm.ops.price import price_case
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError
from rapidllm.spec.experiment import expand
from rapidllm.spec.layout import Parallelism
from rapidllm.spec.paths import project_root
from rapidllm.validate.suites import load_suite


def test_even_as_possible_split_earlier_stages_take_the_remainder() -> None:
    assert Parallelism(pp=8).stage_layers(94) == (12, 12, 12, 12, 12, 12, 11, 11)
    assert Parallelism(pp=8).stage_layers(96) == (12,) * 8
    # interleaved: model chunk k = c * pp + s, so the extra layers go to chunk 0 of the first stages
    assert Parallelism(pp=4, schedule="interleaved", virtual_stages=2).stage_chunk_layers(10) == \
        ((2, 1), (2, 1), (1, 1), (1, 1))


def test_megatron_embedding_and_loss_slots() -> None:
    """Qwen3-235B (94 layers) as Megatron-MoE-ModelZoo runs it: 94 + embedding + loss = 96 slots."""
    par = Parallelism(pp=8, schedule="interleaved", virtual_stages=4, embedding_in_split=True, loss_in_split=True)
    chunks = par.stage_chunk_layers(94)
    assert chunks[0] == (2, 3, 3, 3) and chunks[-1] == (3, 3, 3, 2)
    assert all(c == (3, 3, 3, 3) for c in chunks[1:-1])
    assert par.stage_layers(94) == (11,) + (12,) * 6 + (11,)
    deep = Parallelism(pp=32, schedule="interleaved", virtual_stages=3, embedding_in_split=True, loss_in_split=True)
    split = deep.stage_chunk_layers(94)
    assert split[0] == (0, 1, 1) and split[-1] == (1, 1, 0) and sum(map(sum, split)) == 94
    assert Parallelism(pp=1, embedding_in_split=True, loss_in_split=True).stage_layers(94) == (94,)


@pytest.fixture
def gpt(gpt_case: dict):
    """GPT-175B shapes with a chosen layer count, pp 8, on the toy machine."""
    base = yaml.safe_load((ROOT / "config" / "models" / "gpt-175b.yaml").read_text())

    def make(layers: int, **par):
        model = {**base, "name": f"gpt-{layers}l", "layers": layers}
        return resolve_case({**gpt_case, "model": model, "parallelism": {**gpt_case["parallelism"], **par}}, "t")
    return make


def test_layout_check_accepts_uneven_and_rejects_too_many_chunks(gpt) -> None:
    assert gpt(94).parallelism.stage_layers(94) == (12,) * 6 + (11, 11)
    with pytest.raises(SpecError, match="pp x virtual_stages = 96 exceeds the 94 layer slots"):
        gpt(94, pp=32, schedule="interleaved", virtual_stages=3)


def _step(case) -> dict:
    return training_record(case, price_case(case))


def test_slowest_stage_sets_the_step(gpt) -> None:
    """94 layers on pp 8 (stages of 12 and 11) run no faster than 11 layers everywhere and no slower than 12
    everywhere, and at least m times the slowest stage's forward + backward (its steady state)."""
    uneven, low, high = (_step(gpt(n)) for n in (94, 88, 96))
    assert low["step_time_s"] < uneven["step_time_s"] <= high["step_time_s"]
    x = _plan_inputs(gpt(94))
    per_stage = x.f_span[:, 0] + x.b_span[:, 0]
    assert np.argmax(per_stage[1:-1]) == 0 and per_stage[1] > per_stage[6]   # 12-layer vs 11-layer stages
    assert uneven["step_time_s"] >= x.m * per_stage.max()


def _plan_inputs(case) -> PipelineInputs:
    return training_plan(case, price_case(case), CommCost(case)).inputs


def test_gpipe_closed_form_with_unequal_stages() -> None:
    """GPipe on an idle network is a flow shop of identical jobs: sum of stage times + (m-1) x the slowest,
    for the forwards and again for the backwards."""
    pp, m = 4, 6
    f = np.array([[3.0], [2.0], [2.0], [1.0]])
    b = 2 * f
    zero = np.zeros(pp)
    x = PipelineInputs("gpipe", pp, 1, m, f, f, b, b, zero, zero, optimizer_s=zero)
    g = build_pipeline(x)
    _, finish, _ = longest_path(g.dur, g.dep_ptr, g.dep_idx)
    expected = f.sum() + (m - 1) * f.max() + b.sum() + (m - 1) * b.max()
    assert finish.max() == pytest.approx(expected)


def test_memory_uses_the_heaviest_stage(gpt) -> None:
    """Stage 0 of 94 layers on pp 8 holds 12 layers and the embedding, exactly like stage 0 of 96 layers."""
    uneven, even = gpt(94), gpt(96)
    worst = memory_for_case(uneven)
    assert uneven.parallelism.stage_layers(94)[worst.stage] == 12
    assert memory_for_case(uneven, stage=0).peak == memory_for_case(even, stage=0).peak
    assert memory_for_case(uneven, stage=7).peak < memory_for_case(even, stage=7).peak
    assert closed_form_memory(uneven).activations == closed_form_memory(even).activations


def test_moe_suite_scores_every_qwen3_235b_row() -> None:
    suite = load_suite(project_root() / "validation" / "suites" / "moe_qwen3_h100.yaml")
    rows = expand(suite.experiment)
    assert [r["meta_row"] for r in rows] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert [row for row, _ in suite.skipped] == [5]
