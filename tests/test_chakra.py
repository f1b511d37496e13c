"""Chakra traces that stock ASTRA-sim can replay: checked without an ASTRA-sim binary.

Every send has exactly one matching receive, every collective names a communicator group whose ranks are
the mapping's group, each rank's DAG is acyclic, each rank's compute adds up to our engine's compute for its
stage, and a collective blocks only the operator that consumes it (the weight-gradient GEMM runs beside the
backward TP all-reduce, as in our own graph).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter

import pytest

from rapidllm.engine.chakra import _producer, export_ranks, group_ids, rank_trace, read_chakra, stage_compute_s
from rapidllm.engine.comm_cost import CommCost
from rapidllm.engine.composer import training_plan
from rapidllm.graph.pipeline_dag import consumer_of
from rapidllm.graph.templates import case_templates
from rapidllm.ops.price import price_case
from rapidllm.prediction import evaluate, export_chakra
from rapidllm.spec.case import resolve_case
from rapidllm.spec.errors import SpecError

LAYOUTS = {
    "tp2-pp2-dp2": dict(tp=2, pp=2, dp=2, sp=True, recompute="selective"),
    "tp8-no-sp": dict(tp=8, pp=1, dp=1, sp=False),
    "interleaved-zero1": dict(tp=2, pp=2, dp=2, sp=True, schedule="interleaved", virtual_stages=2, zero=1),
    "fsdp": dict(tp=1, pp=1, dp=8, fsdp="full_shard"),
    "tp8-sp": dict(tp=8, pp=1, dp=1, sp=True),
}


def _case(name: str):
    return resolve_case({"model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100",
                         "precision": "bf16",
                         "workload": {"mode": "training", "seq_len": 2048, "global_batch": 8, "micro_batch": 1},
                         "parallelism": LAYOUTS[name]}, name)


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def traced(request):
    case = _case(request.param)
    ops = price_case(case)
    plan = training_plan(case, ops, CommCost(case))
    groups = group_ids(case)
    table = groups[0]
    traces = {r: rank_trace(case, ops, r, plan, groups) for r in export_ranks(case, per_class=False)}
    return case, plan, table, traces


def test_every_send_has_exactly_one_matching_receive(traced):
    _, _, _, traces = traced
    sends = Counter((n.comm_src, n.comm_dst, n.comm_tag, n.comm_size) for r, ns in traces.items() for n in ns
                    if n.type == "COMM_SEND_NODE")
    recvs = Counter((n.comm_src, n.comm_dst, n.comm_tag, n.comm_size) for r, ns in traces.items() for n in ns
                    if n.type == "COMM_RECV_NODE")
    assert sends == recvs
    assert all(k == 1 for k in sends.values())
    for r, ns in traces.items():
        assert all(n.comm_src == r for n in ns if n.type == "COMM_SEND_NODE")
        assert all(n.comm_dst == r for n in ns if n.type == "COMM_RECV_NODE")


def test_collectives_name_groups_whose_ranks_are_the_mappings_group(traced):
    case, _, table, traces = traced
    cost = CommCost(case)
    axis_of = {}
    for axis in ("tp", "cp", "ep", "dp"):
        if case.parallelism.size(axis) > 1:
            for g in cost.groups(axis, -1):
                axis_of[tuple(sorted(g))] = axis
    for r, ns in traces.items():
        for n in ns:
            if n.type != "COMM_COLL_NODE":
                continue
            assert n.pg_name in table and n.pg_name != "0"
            members = tuple(table[n.pg_name])
            assert r in members
            axis = n.name.split(".")[-2]
            assert axis_of[members] == axis
            assert list(members) == sorted(cost.mapping.group_ranks(axis, r)) or axis == "ep"


def test_each_rank_is_acyclic_and_its_compute_matches_the_engine(traced):
    case, plan, _, traces = traced
    per_stage = stage_compute_s(plan)
    for r, ns in traces.items():
        for k, n in enumerate(ns):
            assert all(0 <= d < k for d in n.deps), (r, k, n.name)
        s = CommCost(case).mapping.parallel_coords(r)["pp"]
        compute = sum(n.duration_us for n in ns if n.type == "COMP_NODE") / 1e6
        assert math.isclose(compute, per_stage[s], rel_tol=1e-9)


def test_critical_stage_compute_is_the_predicted_compute(traced):
    case, plan, _, _ = traced
    rec = evaluate(case)
    assert math.isclose(rec["compute_time_s"], stage_compute_s(plan)[rec["critical_stage"]], rel_tol=1e-9)


def test_collectives_block_only_their_consumers(traced):
    """No compute node waits for a collective unless it consumes it; a wgrad GEMM waits only for the
    sequence-parallel re-gather of its input (never for the reduction of the input gradient)."""
    case, _, _, traces = traced
    ns = traces[0]
    for n in ns:
        if n.type != "COMP_NODE":
            continue
        waits = [ns[d] for d in n.deps if ns[d].type == "COMM_COLL_NODE"]
        if "wgrad" in n.name:
            assert all(w.comm_type == "ALL_GATHER" for w in waits) and (case.parallelism.sp or not waits), n.name
    if case.parallelism.tp > 1 and not case.parallelism.sp:
        # the backward TP all-reduce after qkv_dgrad: launched right after its producer, not chained to it
        names = [n.name for n in ns]
        i = next(k for k, n in enumerate(ns) if n.type == "COMM_COLL_NODE" and ".bwd" not in n.name
                 and "qkv_dgrad" in ns[n.deps[0]].name)
        assert ns[i].deps == [i - 1]
        following = ns[i + 1]
        assert i not in following.deps, names[i + 1]


def test_all_gathers_carry_one_ranks_input_as_astra_sim_counts_them(traced):
    """ASTRA-sim's ring all-gather sends comm_size per step; our nccl-tests size is the gathered output."""
    case, _, table, traces = traced
    ours = {n.nbytes for t in case_templates(case, price_case(case)) for n in t.nodes if n.op == "all_gather"}
    for n in traces[0]:
        if n.comm_type == "ALL_GATHER" and ".grad_bucket" not in n.name and "dp." not in n.name:
            assert any(math.isclose(n.comm_size * len(table[n.pg_name]), b, rel_tol=1e-6) for b in ours), n.name


def test_fsdp_gathers_run_one_layer_ahead(traced):
    """A layer's weight gather starts when the previous layer starts computing (prefetch depth one), so
    only the first gather of a chunk is exposed, as the engine's composition assumes."""
    case, _, _, traces = traced
    if case.parallelism.fsdp != "full_shard":
        return
    ns = traces[0]
    gathers = [k for k, n in enumerate(ns) if n.name.endswith("dp.all_gather") and "param_gather" not in n.name]
    firsts = {ns[g].name: g for g in reversed(gathers)}       # the first gather of each action waits
    later = [g for g in gathers if g not in firsts.values()]
    assert len(later) > 2
    for g in later:
        starts = [d for d in ns[g].deps if ns[d].type == "COMP_NODE"]
        # launched after the previous layer's first operator, not its last: its other operators lie between
        assert starts and all(any(ns[k].type == "COMP_NODE" for k in range(d + 1, g)) for d in starts), ns[g].name


def test_producer_inverts_consumer():
    for pp, v in ((1, 1), (4, 1), (4, 2)):
        for kind in "FB":
            for s in range(pp):
                for c in range(v):
                    src = _producer(kind, s, c, pp, v)
                    if src is not None:
                        assert consumer_of(kind, src[0], src[1], 0, pp, v) == (kind, s, c, 0)


def test_readme_of_an_infeasible_or_faulty_case_says_so(tmp_path):
    """An infeasible case's README read 'rapidllm predicts nan s'; a faulty one compared a degraded-link
    prediction with a replay that has no faults, without a word."""
    from rapidllm.engine.chakra import write_readme
    from rapidllm.spec.network import FaultSpec

    case = _case("fsdp")
    write_readme(case, tmp_path, {"status": "infeasible", "reason": "needs 99 GiB"}, False)
    text = (tmp_path / "README.md").read_text()
    assert "nan" not in text and "does not fit in memory (needs 99 GiB)" in text
    faulty = dataclasses.replace(case, network=dataclasses.replace(
        case.network, faults=(FaultSpec(link=(0, 8), bandwidth_factor=0.5),)))
    write_readme(faulty, tmp_path, {"status": "ok", "step_time_s": 2.0, "compute_time_s": 1.0}, False)
    assert "predicts 2 s" in (tmp_path / "README.md").read_text() and "1 degraded or failed link" in \
        (tmp_path / "README.md").read_text()


def test_files_round_trip_with_group_json_and_readme(tmp_path):
    case = _case("tp2-pp2-dp2")
    paths = export_chakra(case, tmp_path, per_class=True)
    assert [p.name for p in paths] == ["trace.0.et", "trace.4.et"]
    table = json.loads((tmp_path / "comm_groups.json").read_text())
    assert all(k.isdigit() and int(k) > 0 for k in table)
    assert "--comm-group-configuration" in (tmp_path / "README.md").read_text()
    ours = rank_trace(case, price_case(case), 4)
    nodes = read_chakra(paths[1])
    assert [n.name for n in nodes] == [n.name for n in ours]
    assert [list(n.data_deps) for n in nodes] == [n.deps for n in ours]
    attrs = {a.name for n in nodes for a in n.attr}
    assert {"comm_tag", "pg_name", "comm_src", "comm_dst", "comm_type", "comm_size", "is_cpu_op"} <= attrs


def test_inference_case_is_refused_with_a_clear_error():
    case = resolve_case({"model": "llama2-7b", "hardware": "a100-sxm4-80gb", "network": "dgx-a100",
                         "precision": "bf16", "parallelism": {"tp": 1},
                         "workload": {"mode": "inference", "batch": 1, "prompt_tokens": 16, "output_tokens": 4}},
                        "x")
    with pytest.raises(SpecError, match="training"):
        rank_trace(case, price_case(case), 0)
