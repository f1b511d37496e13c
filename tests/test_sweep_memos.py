"""The eleventh session's sweep memo tables (issue 16, sweep-1000) return what the functions they skip
return: per-stage state bytes shared across recompute and workload (`memory.model.shared_state_bytes`),
optimizer rows priced once per distinct operator (`ops.price.price_table`), parameter counts per model
object (`ops.params.parameter_counts`), per-stage parameters (`engine.composer.stage_parameters`), views
of priced tables read from a shared head (`graph.templates.OpsView`). Each case is computed with tables
shared by all cases (so later ones hit what earlier ones stored) and again alone, in a fresh scope."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from rapidllm.caches import Caches
from rapidllm.engine.composer import stage_parameters
from rapidllm.memory.model import memory_for_case, shared_state_bytes
from rapidllm.memory.state import conventions, stage_layer_counts, state_bytes
from rapidllm.ops.params import _parameter_counts, parameter_counts
from rapidllm.ops.price import price_case_reference, price_table
from rapidllm.spec.case import resolve_case


def _cases(gpt_case: dict) -> list:
    """Dense and MoE (with redundant experts) layouts over ZeRO 0-3, FSDP, fp32 gradient accumulation,
    bf16 and fp32, recompute and micro-batch, which the state memo must tell apart or share."""
    out = []
    for model, (dp, tp, pp, ep), zero, prec, recompute, mb in itertools.product(
            ("gpt-22b", "mixtral-8x7b"), ((8, 1, 1, 1), (2, 2, 2, 2), (4, 2, 1, 4)), (0, 1, 3),
            ("bf16", "fp32"), ("selective", "full"), (1, 2)):
        par = dict(dp=dp, tp=tp, pp=pp, ep=ep, zero=zero, recompute=recompute, sp=tp > 1)
        if zero == 0 and prec == "bf16":
            par["fp32_grad_accum"] = True
        if model == "gpt-22b" and ep > 1:
            continue
        if model.startswith("mixtral") and ep > 1 and dp == 4:
            par["redundant_experts"] = 0
        out.append({**gpt_case, "model": model, "precision": prec, "parallelism": par,
                    "workload": {**gpt_case["workload"], "global_batch": 16, "micro_batch": mb}})
    out.append({**gpt_case, "model": "gpt-22b", "parallelism": dict(dp=2, tp=2, pp=2, fsdp="full_shard"),
                "workload": {**gpt_case["workload"], "global_batch": 16}})
    return out


def test_shared_memos_equal_fresh_values(gpt_case: dict) -> None:
    mappings = _cases(gpt_case)
    with Caches().active():
        cases = [resolve_case(m, "x") for m in mappings]
        shared = [(memory_for_case(c), price_table(c).rows, parameter_counts(c.model), stage_parameters(c))
                  for c in cases]
        states = [shared_state_bytes(c, conventions(c), stage_layer_counts(c, conventions(c)),
                                     tuple(range(c.parallelism.pp))) for c in cases]
    assert len({(c.model.name, c.parallelism.zero, c.precision) for c in cases}) > 10
    for case, (memory, rows, counts, params), st in zip(cases, shared, states):
        conv = conventions(case)
        assert st == [state_bytes(case, s, conv) for s in range(case.parallelism.pp)]
        with Caches().active():
            assert memory == memory_for_case(case)
            assert rows == price_table(case).rows
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(params, stage_parameters(case)))
        assert counts == _parameter_counts(case.model)
        fresh = price_case_reference(case)
        assert [tuple(r) for r in fresh.itertuples(index=False)] == [tuple(r) for r in rows]


def test_parameter_counts_follow_the_model_object(gpt_case: dict) -> None:
    """A changed model (another object) gets its own counts, never the first one's."""
    with Caches().active():
        case = resolve_case({**gpt_case, "model": "gpt-22b"}, "x")
        first = parameter_counts(case.model)
        wider = dataclasses.replace(case.model, hidden=case.model.hidden * 2)
        assert parameter_counts(wider) == _parameter_counts(wider) != first
        assert parameter_counts(case.model) is first


def test_views_with_a_shared_head_equal_whole_views(gpt_case: dict) -> None:
    """An `OpsView` of a table with shared leading rows (its head's columns read once per shared rows,
    `Caches.shared_views`) has the lists, sections and numeric arrays (values and dtypes) of a view of the
    same rows read whole."""
    from rapidllm.graph.templates import OpsView
    from rapidllm.ops.price import OperatorTable

    with Caches().active():
        tables = [price_table(resolve_case(m, "x")) for m in _cases(gpt_case)]
        assert len({id(t.shared) for t in tables}) < len(tables)         # heads are shared
        for table in tables:
            view, whole = OpsView(table), OpsView(OperatorTable(table.rows))
            assert view.shared is table.shared and whole.shared is None
            assert (view.names, view.phases, view.section_of, view.sections) == \
                   (whole.names, whole.phases, whole.section_of, whole.sections)
            for a, b in ((view.timed, whole.timed), (view.work, whole.work)):
                assert a.dtype == b.dtype and np.array_equal(a, b)
            again = np.array([phase == "recompute" for phase in whole.phases], dtype=bool)
            for rows in [tuple(r) for r in whole.sections.values()] + [(), tuple(range(len(whole.names)))]:
                for recompute_only in (False, True):
                    per_row = np.where(again, whole.work, 0.0) if recompute_only else whole.work
                    for _ in range(2):                  # computed, then kept in the shared head
                        assert view.flops_sum(rows, recompute_only) == float(per_row[list(rows)].sum())


def test_contending_groups_equal_the_per_rank_filter() -> None:
    """`CommCost._contending` (first ranks' network coordinates computed at once) keeps the groups the
    per-rank definition keeps: those whose first rank shares the first group's coordinate in every network
    dimension the group does not span, all of them across a plain fat tree or with faults."""
    import random

    from rapidllm.engine.comm_cost import CommCost
    from rapidllm.network.mapping import dims_spanned
    from rapidllm.spec.experiment import expand_row, load_experiment, raw_cases
    from rapidllm.spec.paths import config_dir

    def reference(cost: CommCost, groups: list) -> list:
        net = cost.case.network
        if not cost.symmetric or len(groups) < 2:
            return groups
        spanned = set(dims_spanned(net, list(groups[0])))
        if any(net.dimensions[d].topology == "fat_tree" and not net.dimensions[d].rail_optimized for d in spanned):
            return groups
        line = lambda r: tuple(v for d, v in enumerate(cost.mapping.dim_coords(r)) if d not in spanned)  # noqa: E731
        return [g for g in groups if line(g[0]) == line(groups[0][0])]

    checked = 0
    for name in ("sweep-1000", "case-topology", "case-faults"):
        exp = load_experiment(config_dir("experiment") / f"{name}.yaml")
        with Caches().active():
            raws = list(raw_cases(exp))
            for i in random.Random(3).sample(range(len(raws)), 25):
                case = expand_row(exp, i, *raws[i], case_json=False)[1]
                if case is None:
                    continue
                cost = CommCost(case)
                for axis in ("tp", "cp", "dp", "pp"):
                    groups = cost.groups(axis, 0)
                    assert cost._contending(groups) == reference(cost, groups), (name, i, axis)
                    checked += 1
    assert checked > 150
