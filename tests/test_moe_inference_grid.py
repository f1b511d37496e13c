"""Inference MoE grids as serving engines run them (docs/engine.md, "Expert grid").

TensorRT-LLM splits the experts of a `tp` group as moe_tp x moe_ep = tp, and vLLM's
--enable-expert-parallel places whole experts over the ranks that already hold the TP group's tokens: in
inference `tp: 8, ep: 8` on 8 GPUs is one whole expert of Mixtral's eight per GPU (etp = tp / ep = 1), no
all-to-all, and the TP all-reduce after the MoE block sums the experts' outputs. Until this was fixed the
layout was priced with the experts split ep x etp = 64 ways (1.7 GiB of weights a GPU)."""
from __future__ import annotations

import dataclasses

import pytest

from rapidllm.graph.comm_nodes import communication_nodes
from rapidllm.graph.templates import layer_rules
from rapidllm.memory.state import stage_params, state_bytes
from rapidllm.ops.price import local_expert_parameters
from rapidllm.prediction import evaluate
from rapidllm.spec.case import Case, resolve_case
from rapidllm.spec.errors import SpecError

H, FFN, LAYERS, EXPERTS, VOCAB = 4096, 14336, 32, 8, 32000          # Mixtral-8x7B (config/models)
EXPERT_PARAMS = 3 * H * FFN                                           # gated: up, gate, down


def mixtral(mode: str = "inference", **par) -> Case:
    workload = (dict(mode="inference", batch=8, prompt_tokens=1024, output_tokens=64) if mode == "inference"
                else dict(mode="training", seq_len=2048, global_batch=8, micro_batch=1))
    return resolve_case(dict(model="mixtral-8x7b", hardware="h100-sxm5-80gb", network="dgx-h100",
                             workload=workload, parallelism=par), "test")


def test_tp8_ep8_holds_one_expert_in_eight_per_gpu() -> None:
    """Weights a GPU by hand: 32 layers of one whole expert, plus the dense eighth (attention, embedding and
    head split by tp 8; norms and the router whole): 10.88 GiB, where the 64-way split gave 1.69 GiB."""
    case = mixtral(tp=8, ep=8)
    p = case.parallelism
    assert (p.expert_tp, p.edp) == (1, 1)
    experts = LAYERS * (EXPERTS // 8) * EXPERT_PARAMS
    assert local_expert_parameters(case) == stage_params(case, 0).experts == experts
    dense = LAYERS * ((2 * H * H + 2 * H * 1024) / 8 + 2 * H + H * EXPERTS) + 2 * VOCAB * H / 8 + H
    assert state_bytes(case).weights == pytest.approx(2 * (dense + experts), rel=1e-12)
    assert 2 * (dense + experts) / 2**30 == pytest.approx(10.88, abs=0.005)


def test_expert_bytes_per_gpu_do_not_depend_on_how_tp_splits_them() -> None:
    """tp 8 with ep 1 (each expert split 8 ways), 2, 4 or 8 (whole experts): an eighth of every expert
    weight a GPU either way; only the 1/ep x 1/etp shape differs."""
    per_gpu = {ep: stage_params(mixtral(tp=8, ep=ep), 0).experts for ep in (1, 2, 4, 8)}
    assert len(set(per_gpu.values())) == 1
    assert [mixtral(tp=8, ep=ep).parallelism.expert_tp for ep in (1, 2, 4, 8)] == [8, 4, 2, 1]


def test_ep_inside_tp_dispatches_nothing_and_all_reduces() -> None:
    """No all-to-all in the tp 8 ep 8 graph; each MoE layer keeps the two TP all-reduces (after attention,
    and the one after the experts, which combines their partial outputs). EP over data-parallel ranks
    (tp 1, dp 8, ep 8) keeps its dispatch and combine."""
    case = mixtral(tp=8, ep=8)
    assert not [n for n in communication_nodes(case) if n.axis == "ep"]
    moe_tp = [n for n in communication_nodes(case) if n.scope == "layer_moe" and n.axis == "tp"]
    assert [(n.op, n.count) for n in moe_tp] == [("all_reduce", 1)] * 2
    rules = layer_rules(case, 8, True, False)
    assert [r.axis for r in rules] == ["tp", "tp"]
    assert [r.op for r in layer_rules(mixtral(tp=1, dp=8, ep=8), 8, True, False)] == ["all_to_all"] * 2


def test_the_experts_see_every_token_of_the_tp_group() -> None:
    """Each rank's grouped GEMM: its one whole expert (n = 2 x ffn) on the tokens routed to it out of the
    group's tokens (8 sequences x top 2 over 8 experts: 2 on average; ep 8 ranks do not multiply them)."""
    from rapidllm.ops import workload as wl
    case = mixtral(tp=8, ep=8)
    ops = {o.name: o for o in wl.layer_forward(case.model, wl.decode_shard(case, 1024), True)}
    assert ops["expert_up"].gemm == (1, 8 * 2 // EXPERTS, 2 * FFN, H)
    assert "router" in ops and ops["router"].gemm[1] == 8                # every rank routes the group's 8 tokens


def test_decode_is_never_faster_than_the_64_way_split() -> None:
    """The old pricing (experts split ep x etp = 64 ways, an all-to-all inside the TP group), rebuilt past the
    rule that now refuses it, against the engines' grid: the decode of a weight-bound step reads 8x the expert
    bytes, so it can only get slower, and equals the tp 8 ep 1 weight bytes."""
    case = mixtral(tp=8, ep=8)
    old = dataclasses.replace(case, parallelism=dataclasses.replace(case.parallelism, etp=8))
    new_rec, old_rec = evaluate(case), evaluate(old)
    assert new_rec["itl_s"] >= old_rec["itl_s"]
    assert new_rec["peak_memory_bytes"] > old_rec["peak_memory_bytes"]
    assert state_bytes(case).weights == state_bytes(mixtral(tp=8)).weights


@pytest.mark.parametrize("par,key,why", [
    (dict(tp=2, dp=4, ep=8), "parallelism.ep", "16 expert shards do not tile the dp x cp x tp = 8 ranks"),
    (dict(tp=8, ep=2, etp=2), "parallelism.etp", "allowed: 4 or 8"),
    (dict(tp=8, etp=1), "parallelism.etp", "allowed: 8"),
])
def test_grids_no_engine_runs_are_refused(par: dict, key: str, why: str) -> None:
    with pytest.raises(SpecError, match=f"{key}: .*{why}"):
        mixtral(**par)


def test_training_keeps_megatron_core_grid() -> None:
    """Training is not touched: etp defaults to tp, so tp 8 ep 8 on 8 GPUs stays refused."""
    with pytest.raises(SpecError, match="parallelism.ep: ep 8 x etp 8 = 64 expert shards"):
        mixtral("training", tp=8, ep=8)
    assert mixtral("training", tp=8, ep=1).parallelism.etp is None


def test_search_layouts_are_the_engines_grid() -> None:
    """An inference search over Mixtral on 8 GPUs (one model instance, dp 1): every valid EP layout keeps EP
    inside its TP group, built with etp = tp / ep, which the ranked table shows (tp 8 ep 8: etp 1)."""
    from rapidllm.search import load_search
    from rapidllm.search.space import layouts
    loaded = load_search({"name": "moe-inference", "model": "mixtral-8x7b", "hardware": "h100-sxm5-80gb",
                          "network": "dgx-h100", "gpus": 8,
                          "workload": {"mode": "inference", "prompt_tokens": 512, "output_tokens": 64},
                          "space": {"batch": [8], "attention_impl": ["flash"]}})
    valid = [(lay.columns, lay.case) for lay in layouts(loaded, loaded.candidates[0], 8) if lay.case is not None]
    ep_layouts = [(c, case) for c, case in valid if c["ep"] > 1]
    assert ep_layouts and all(c["etp"] * c["ep"] == c["tp"] == case.parallelism.expert_tp * case.parallelism.ep
                              for c, case in ep_layouts)
    assert any((c["tp"], c["ep"], c["etp"]) == (8, 8, 1) for c, _ in ep_layouts)
