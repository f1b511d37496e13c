"""Data-parallel collectives around the optimizer: Megatron-Core --overlap-param-gather
(`parallelism.overlap_param_gather`: closed form, constraints, the step it shortens; docs/engine.md) and the
gradient reduction of a model small enough for one bucket."""
import copy

import pytest

from rapidllm.engine.composer import exposed_param_gather
from rapidllm.prediction import evaluate
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError

CASE = {"model": "llama2-7b", "hardware": "h100-sxm5-80gb", "network": "dgx-h100", "precision": "bf16",
        "workload": {"mode": "training", "seq_len": 2048, "global_batch": 16, "micro_batch": 1},
        "parallelism": {"dp": 8, "tp": 1, "pp": 1, "zero": 1}}


def test_exposed_part_is_one_bucket_or_what_the_forward_cannot_hide():
    assert exposed_param_gather(1e-3, 10, 4e-3) == pytest.approx(6e-3)     # 10 ms of gathers, 4 ms of forward
    assert exposed_param_gather(1e-3, 10, 20e-3) == pytest.approx(1e-3)    # the first bucket is always waited for
    assert exposed_param_gather(1e-3, 1, 0.0) == pytest.approx(1e-3)


@pytest.mark.parametrize("change", [{"zero": 0}, {"zero": 3}, {"zero": 0, "fsdp": "full_shard"}])
def test_needs_a_sharded_optimizer(change):
    case = copy.deepcopy(CASE)
    case["parallelism"].update(change, overlap_param_gather=True)
    with pytest.raises(SpecError, match="overlap_param_gather"):
        resolve_case(case, "test")


def test_overlap_shortens_the_step_by_at_most_the_gather():
    on = copy.deepcopy(CASE)
    on["parallelism"]["overlap_param_gather"] = True
    base, over = evaluate(resolve_case(CASE, "t")), evaluate(resolve_case(on, "t"))
    saved = base["step_time_s"] - over["step_time_s"]
    assert 0.0 < saved <= base["exposed_comm_s"]
    assert over["compute_time_s"] == pytest.approx(base["compute_time_s"])


def test_a_single_gradient_bucket_is_still_reduced():
    """A model whose chunk fits one bucket (< 40M parameters) reduces its gradients all the same: dp 8 costs
    more than dp 1 at the same per-replica work, by exposed communication only."""
    tiny = {"name": "tiny", "hidden": 512, "layers": 4, "heads": 8, "kv_heads": 8, "ffn": 2048, "vocab": 8000,
            "mlp": "gated", "position": "rope", "norm": "rmsnorm", "tied_embeddings": True, "max_seq_len": 1024}
    rec = {}
    for dp in (1, 8):
        case = {**CASE, "model": tiny, "network": "superpod-ndr", "parallelism": {"dp": dp},
                "workload": {"mode": "training", "seq_len": 1024, "global_batch": 2 * dp, "micro_batch": 1}}
        rec[dp] = evaluate(resolve_case(case, "t"))
    assert rec[1]["exposed_comm_s"] == 0.0 and rec[8]["exposed_comm_s"] > 0.0
    assert rec[8]["step_time_s"] > rec[1]["step_time_s"]
    assert rec[8]["compute_time_s"] == pytest.approx(rec[1]["compute_time_s"])


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 4, 1, 8), ("1f1b", 1, 1, 3), ("interleaved", 2, 2, 4)])
def test_reduce_after_backward_builders_agree_and_expose_every_bucket(schedule, p, v, m):
    """overlap_grad_reduce false (Megatron-LM 2021-22 local DDP): numba and reference builders agree node for
    node; every bucket runs after the stage's last backward, so the step grows by what the overlap hid,
    at most all buckets."""
    import dataclasses

    import numpy as np

    from rapidllm.engine.replay import longest_path
    from rapidllm.graph.pipeline_dag import PipelineInputs, build_pipeline, build_pipeline_reference
    f, b = np.full((p, v), 1.0), np.full((p, v), 2.0)
    x = PipelineInputs(schedule, p, v, m, f, f, b, b, np.full(p, 0.1), np.full(p, 0.1), 3, 0.4,
                       np.full(p, 0.2), 0.0, (0,), (1,))
    late = dataclasses.replace(x, grad_overlap=False)
    fast, ref = build_pipeline(late), build_pipeline_reference(late)
    for name in ("dur", "compute", "kind", "stage", "dep_ptr", "dep_idx"):
        assert np.array_equal(getattr(fast, name), getattr(ref, name)), name
    step = lambda g: float(longest_path(g.dur, g.dep_ptr, g.dep_idx)[1].max())   # noqa: E731
    hidden, exposed = step(build_pipeline(x)), step(fast)
    assert hidden < exposed <= hidden + 3 * v * 0.4 + 1e-9


def test_megatron_2021_rows_reduce_gradients_after_the_backward():
    late = {**CASE, "parallelism": {**CASE["parallelism"], "overlap_grad_reduce": False}}
    a, b = evaluate(resolve_case(CASE, "t")), evaluate(resolve_case(late, "t"))
    assert b["step_time_s"] > a["step_time_s"] and b["compute_time_s"] == pytest.approx(a["compute_time_s"])
