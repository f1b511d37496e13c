"""Selective recompute by Megatron-Core --recompute-modules name: what reruns, what it costs, what it frees."""
from __future__ import annotations

import pytest

from rapidllm.graph.templates import layer_templates
from rapidllm.memory.model import training_liveness
from rapidllm.ops import workload as wl
from rapidllm.ops.price import price_case
from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.errors import SpecError


def qwen3(recompute: str = "selective", **par) -> Case:
    """Qwen3-235B-A22B, TP 4 x EP 8 (etp 1), the ModelZoo's long-context layout at 16k tokens."""
    return resolve_case(dict(model="qwen3-235b-a22b", hardware="h100-sxm5-80gb", network="superpod-ndr",
                             workload=dict(mode="training", seq_len=16384, global_batch=64, micro_batch=1),
                             parallelism=dict(tp=4, ep=8, etp=1, pp=8, dp=8, sp=True, zero=1,
                                              moe_dispatcher="deepep", recompute=recompute, **par)), "test")


def rerun(case: Case) -> list[str]:
    return [o.name for o in wl.layer_training(case.model, wl.training_shard(case), True, case.parallelism.recompute,
                                              case.parallelism.recompute_modules) if o.phase == "recompute"]


def test_modules_select_their_operators() -> None:
    assert rerun(qwen3()) == ["attn"]                                  # Megatron's default: core_attn
    assert rerun(qwen3(recompute_modules=["core_attn"])) == ["attn"]
    assert rerun(qwen3(recompute_modules=["layernorm", "moe_act"])) == ["norm1", "norm2", "expert_act"]
    assert rerun(qwen3(recompute_modules=["moe"])) == ["router", "permute", "expert_up", "expert_act",
                                                       "expert_down", "unpermute"]
    assert rerun(qwen3("none")) == []
    forward = wl.layer_forward(qwen3().model, wl.training_shard(qwen3()), True)
    assert rerun(qwen3("full")) == [o.name for o in forward]


def ep_all_to_alls(case: Case) -> tuple[int, int]:
    """(EP all-to-alls in the backward template, of them in its recompute part) of the MoE layer."""
    bwd = next(t for t in layer_templates(case, price_case(case)) if t.part == "bwd")
    ep = [i for i, n in enumerate(bwd.nodes) if n.axis == "ep"]
    first_bwd = next(i for i, n in enumerate(bwd.nodes) if n.phase == "bwd")
    return len(ep), sum(i < first_bwd for i in ep)


def test_recomputing_the_moe_block_dispatches_again() -> None:
    """The MoE block's checkpoint reruns its dispatch and combine; a norm and activation rerun sends nothing."""
    assert ep_all_to_alls(qwen3(recompute_modules=["moe"])) == (4, 2)
    assert ep_all_to_alls(qwen3(recompute_modules=["layernorm", "moe_act"])) == (2, 0)
    assert ep_all_to_alls(qwen3("none")) == (2, 0)


def test_recompute_trades_memory_for_time() -> None:
    """More recomputed modules keep fewer activations and take longer; full keeps only the layer input."""
    from rapidllm.engine.engine import training_record
    cases = [qwen3("none"), qwen3(recompute_modules=["layernorm", "moe_act"]),
             qwen3(recompute_modules=["layernorm", "moe"]), qwen3("full")]
    stored = [training_liveness(c)[0].stored for c in cases]
    assert stored[0] > stored[1] > stored[2] > stored[3]
    step = [training_record(c, price_case(c))["step_time_s"] for c in cases]
    assert step[0] < step[1] < step[2] < step[3]


def test_dropped_activations_are_held_again_in_backward() -> None:
    """What a module does not keep comes back for its layer's backward: stored + backward peak is the same
    as without recompute for output-discarding modules (layernorm, moe_act)."""
    plain, lean = (training_liveness(c)[0] for c in (qwen3("none"), qwen3(recompute_modules=["layernorm", "moe_act"])))
    assert lean.stored + lean.backward_peak == pytest.approx(plain.stored + plain.backward_peak, rel=1e-12)


@pytest.mark.parametrize("par,match", [
    (dict(recompute="none", recompute_modules=["moe"]), "parallelism.recompute_modules: .*recompute: selective"),
    (dict(recompute="selective", recompute_modules=["attention"]), "recompute_modules"),
    (dict(recompute="selective", recompute_modules=[]), "recompute_modules"),
])
def test_bad_recompute_modules(par: dict, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        qwen3(**par)


def test_alpha_beta_baseline_reruns_the_same_collectives() -> None:
    """The ablation engine counts a layer collective once more exactly when the event engine does."""
    from rapidllm.engine.baseline import recompute_passes
    assert [recompute_passes(qwen3(**kw), "ep") for kw in (
        dict(recompute="none"), dict(recompute_modules=["layernorm", "moe_act"]), dict(recompute_modules=["moe"]),
        dict(recompute="full"))] == [2, 2, 3, 3]
    assert recompute_passes(qwen3(), "cp") == 3 and recompute_passes(qwen3(), "tp") == 2


def _tp_case(model: str, sp: bool, modules: list[str], **par) -> Case:
    layout = dict(tp=2, pp=1, dp=8, sp=sp, recompute="selective", recompute_modules=modules, **par)
    if model != "llama3.1-8b":
        layout.update(ep=4)
    return resolve_case(dict(model=model, hardware="h100-sxm5-80gb", network="superpod-ndr",
                             workload=dict(mode="training", seq_len=4096, global_batch=64, micro_batch=1),
                             parallelism=layout), "test")


@pytest.mark.parametrize("model, sp, modules, again", [
    ("llama3.1-8b", True, ["mlp"], 1), ("llama3.1-8b", False, ["mlp"], 1), ("llama3.1-8b", True, ["core_attn"], 0),
    ("llama3.1-8b", True, ["layernorm"], 0),
    ("qwen2-57b-a14b", True, ["shared_experts"], 1), ("qwen2-57b-a14b", True, ["moe"], 1),
    ("qwen2-57b-a14b", True, ["moe_act"], 0), ("qwen2-57b-a14b", True, ["mlp"], 0)])
def test_recomputed_module_reruns_its_tp_pair(model: str, sp: bool, modules: list[str], again: int) -> None:
    """Megatron-Core's selective recompute checkpoints a whole module and re-runs its forward in backward
    (transformer_layer.py: `tensor_parallel.checkpoint(self.mlp, ...)` for `mlp`, dense layers only;
    moe_layer.py: the MoE block's `custom_forward` for `moe`, `shared_experts_compute` for
    `shared_experts`), so the TP collectives inside it run again: the fc1 gather and the fc2 reduce-scatter
    under SP (the all-reduce without), though the residual add that reads the reduction is kept. The event
    engine's recompute weaves both (the reduction through `Rule.owner`, waited for by the backward's first
    operator) and the alpha-beta ablation counts the MLP position's pair once more exactly then. Until
    2026-12-02 the graph re-ran the gather alone and the ablation neither."""
    from rapidllm.engine.baseline import recompute_passes
    from rapidllm.graph.comm_nodes import layer_nodes
    from rapidllm.graph.templates import COMM, COMPUTE, ops_view
    case = _tp_case(model, sp, modules)
    section = "layer_moe" if case.model.moe else "layer_dense"
    act = 4096 * case.model.hidden * 2.0
    bwd = next(t for t in layer_templates(case, ops_view(price_case(case)))
               if t.section == section and t.part == "bwd")
    first = next(i for i, n in enumerate(bwd.nodes) if n.kind == COMPUTE and n.phase == "bwd")
    rerun = [(n.op, i) for i, n in enumerate(bwd.nodes[:first])
             if n.kind == COMM and n.axis == "tp" and n.nbytes == act]
    ops = ["all_gather", "reduce_scatter"] if sp else ["all_reduce"]
    assert [op for op, _ in rerun] == ops * again
    if again:
        assert rerun[-1][1] in bwd.nodes[first].deps            # backward starts from the reduced output
    pairs = [n for n in layer_nodes(case, 4096, section) if n.axis == "tp" and n.nbytes == act]
    assert [n.count for n in pairs] == [1, 1]
    assert [recompute_passes(case, n.axis, n.rerun) for n in pairs] == [2, 2 + again]
