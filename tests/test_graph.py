"""Graph builder: schedules, templates, the compact format and the Chakra export round trip."""
import pytest

from rapidllm.pipeline.graph_store import graphs_to_arrays, read_graphs, write_graphs
from rapidllm.graph.schedules import stage_actions
from rapidllm.graph.templates import COMM, case_templates, operator_frame
from rapidllm.ops.price import price_case
from rapidllm.spec.case import resolve_case


@pytest.mark.parametrize("schedule,p,v,m", [("gpipe", 4, 1, 6), ("1f1b", 4, 1, 6), ("interleaved", 4, 2, 8)])
def test_every_stage_runs_each_action_once(schedule, p, v, m) -> None:
    for s in range(p):
        acts = stage_actions(schedule, p, s, m, v)
        assert sorted(acts) == sorted((k, c, i) for k in "FB" for c in range(v) for i in range(m))
        done = set()
        for k, c, i in acts:
            if k == "B":
                assert ("F", c, i) in done
            done.add((k, c, i))


def test_templates_have_megatron_collectives(gpt_case) -> None:
    case = resolve_case({**gpt_case, "parallelism": {"tp": 8, "pp": 8, "sp": False}}, "x")
    t = {(x.section, x.part): x for x in case_templates(case, operator_frame(case))}
    fwd = [n.op for n in t[("layer_dense", "fwd")].nodes if n.kind == COMM]
    bwd = [n.op for n in t[("layer_dense", "bwd")].nodes if n.kind == COMM]
    assert fwd == ["all_reduce", "all_reduce"] and bwd == ["all_reduce", "all_reduce"]
    sp = resolve_case({**gpt_case, "parallelism": {"tp": 8, "pp": 8, "sp": True}}, "x")
    t = {(x.section, x.part): x for x in case_templates(sp, operator_frame(sp))}
    assert sorted(n.op for n in t[("layer_dense", "fwd")].nodes if n.kind == COMM) == ["all_gather"] * 2 + ["reduce_scatter"] * 2


def test_compact_format_round_trip(gpt_case, tmp_path) -> None:
    case = resolve_case(gpt_case, "x")
    templates = case_templates(case, operator_frame(case))
    desc = {"schedule": "1f1b", "pp": 8, "v": 1, "m": 64}
    write_graphs({"abc": (templates, desc)}, tmp_path / "g.npz")
    back = read_graphs(tmp_path / "g.npz")["abc"]
    assert back[1] == desc
    assert [(t.section, t.part, t.nodes) for t in back[0]] == [(t.section, t.part, t.nodes) for t in templates]
    assert graphs_to_arrays({})["name"].size == 0
