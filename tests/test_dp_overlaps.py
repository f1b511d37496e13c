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
