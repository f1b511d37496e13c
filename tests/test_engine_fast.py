"""The numba pipeline path equals the plain-Python one it replaced, node for node and bit for bit.

`build_pipeline` / `attribute` (numba) against `build_pipeline_reference` / `attribute_reference` (the
original dict-and-list builder and Python attribution loop): same nodes, durations, dependency lists in
the same order, hence the same longest path, critical predecessors and breakdown. Whole predictions are
compared too, on GPipe, 1F1B, interleaved, data-parallel bucket and sharded-optimizer, and faulted cases.
"""
import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest
from rapidllm.caches import Caches
from rapidllm.engine import engine as engine_mod
from rapidllm.engine.engine import (
    attribute,
    pipeline_split,
    training_record,
)
from rapidllm.engine.replay import longest_path, relax_split
from reference_impls import (attribute_reference, groups_reference, schedule_actions_reference,
                             stage_actions_reference)
from rapidllm.graph.pipeline_dag import (
    PipelineInputs,
    build_pipeline,
    build_pipeline_reference,
    pipeline_shape,
)
from rapidllm.graph.schedules import schedule_code, stage_actions, stage_actions_array
from rapidllm.ops.price import price_case
from rapidllm.spec.case import resolve_case


def _same_graph(a, b) -> None:
    for field in ("dur", "compute", "kind", "stage", "dep_ptr", "dep_idx"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and x.shape == y.shape, field
        assert np.array_equal(x, y), field


@pytest.mark.parametrize("schedule,p,v,m", [("gpipe", 4, 1, 6), ("gpipe", 3, 2, 5), ("1f1b", 4, 1, 6),
                                            ("1f1b", 8, 1, 3), ("1f1b", 1, 1, 4), ("interleaved", 4, 2, 8),
                                            ("interleaved", 4, 3, 12), ("interleaved", 2, 4, 2)])
def test_stage_actions_array_matches_stage_actions(schedule, p, v, m) -> None:
    code = schedule_code(schedule, p, v)
    for s in range(p):
        d, c, i = stage_actions_array(code, p, s, m, v)
        got = [("F" if a == 0 else "B", int(x), int(y)) for a, x, y in zip(d, c, i)]
        assert got == stage_actions(schedule, p, s, m, v) == stage_actions_reference(schedule, p, s, m, v)


@pytest.mark.parametrize("schedule,p,v,m", [("gpipe", 4, 1, 6), ("1f1b", 4, 1, 6), ("1f1b", 8, 1, 3),
                                            ("1f1b", 1, 1, 4), ("interleaved", 4, 2, 8), ("interleaved", 4, 3, 10),
                                            ("interleaved", 2, 4, 2), ("interleaved", 8, 2, 3)])
def test_one_order_serves_the_memory_walk(schedule, p, v, m) -> None:
    """The memory walk's order (which forward or backward comes next) is the graph's: both read
    spec.schedule.action_order."""
    from rapidllm.spec.schedule import action_order
    for s in range(p):
        d, i = action_order(schedule_code(schedule, p, v), p, s, m, v)
        got = [("F" if a == 0 else "B", int(k)) for a, k in zip(d, i)]
        assert got == schedule_actions_reference(schedule, p, s, m, v)


CASES = [(sch, p, v, m, buckets, gather, ppd, dpd)
         for (sch, p, v, m), (buckets, gather), (ppd, dpd) in itertools.product(
             [("gpipe", 4, 1, 6), ("gpipe", 2, 2, 3), ("1f1b", 4, 1, 8), ("1f1b", 8, 1, 3), ("1f1b", 1, 1, 5),
              ("interleaved", 4, 2, 8), ("interleaved", 3, 3, 6)],
             [(0, 0.0), (1, 0.0), (3, 0.0), (4, 0.7)],
             [((), ()), ((1,), (1,)), ((0, 1), (0, 1, 2))])]


@pytest.mark.parametrize("schedule,p,v,m,buckets,gather,pp_dims,dp_dims", CASES)
def test_builder_and_attribution_match_reference(schedule, p, v, m, buckets, gather, pp_dims, dp_dims) -> None:
    rng = np.random.default_rng(p * 1000 + v * 100 + m * 10 + buckets)
    f, b = rng.uniform(0.5, 1.5, (p, v)), rng.uniform(1.0, 3.0, (p, v))
    x = PipelineInputs(schedule, p, v, m, f, f * rng.uniform(0.7, 1.0, (p, v)), b, b * rng.uniform(0.7, 1.0, (p, v)),
                       rng.uniform(0, 0.3, p), rng.uniform(0, 0.3, p), buckets, 0.4 if buckets else 0.0,
                       rng.uniform(0.1, 0.2, p), gather, pp_dims, dp_dims)
    fast, ref = build_pipeline(x), build_pipeline_reference(x)
    _same_graph(fast, ref)
    res = longest_path(fast.dur, fast.dep_ptr, fast.dep_idx)
    assert attribute(fast, *res) == attribute_reference(ref, *longest_path(ref.dur, ref.dep_ptr, ref.dep_idx))
    _same_split(x)


def _same_split(x) -> None:
    """`pipeline_split` (the shape in Kahn order, filled and relaxed in one pass, the critical stage's nodes
    gathered) equals `attribute` of `build_pipeline` and `longest_path`, bit for bit; also with whole-number
    durations, where ties decide which dependency released a task, and with a NaN duration."""
    tied = dataclasses.replace(x, f_span=np.round(x.f_span * 4), b_span=np.round(x.b_span * 4),
                               p2p_fwd=np.round(x.p2p_fwd * 4), p2p_bwd=np.round(x.p2p_bwd * 4),
                               optimizer_s=np.round(x.optimizer_s * 4))
    broken = np.array(x.f_span, dtype=float)
    broken[-1, -1] = np.nan                          # a NaN duration propagates the same way on both paths
    for inputs in (x, tied, dataclasses.replace(x, f_span=broken)):
        g = build_pipeline(inputs)
        want = attribute(g, *longest_path(g.dur, g.dep_ptr, g.dep_idx))
        got, nodes = pipeline_split(inputs)
        assert nodes == len(g) and {k: repr(v) for k, v in got.items()} == {k: repr(v) for k, v in want.items()}


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 4, 1, 8), ("1f1b", 1, 1, 5), ("gpipe", 3, 1, 4),
                                            ("interleaved", 4, 2, 8)])
@pytest.mark.parametrize("blocking", [False, True])
def test_shared_bucket_shape_gives_each_counts_own_numbers(schedule, p, v, m, blocking) -> None:
    """`pipeline_split` replays the gradient-bucket count on one shape built with one bucket per chunk: for
    several counts, with and without a data-parallel dimension (buckets queued or not), with merged EP
    steps, whole-number durations (ties) and a NaN, the numbers and node count equal those of the DAG built
    for that count (`_same_split`); the counts share one shape object; without overlap_grad_reduce the
    count stays structure."""
    rng = np.random.default_rng(p * 100 + v * 10 + m)
    f, b = rng.uniform(0.5, 1.5, (p, v)), rng.uniform(1.0, 3.0, (p, v))
    with Caches().active():
        for buckets, dp_dims, hidden in itertools.product((2, 3, 7), ((), (1,)), (False, True)):
            x = PipelineInputs(schedule, p, v, m, f, 0.8 * f, b, 0.8 * b, rng.uniform(0, 0.3, p),
                               rng.uniform(0, 0.3, p), buckets, 0.3, rng.uniform(0.1, 0.2, p), 0.0, (1,), dp_dims,
                               f_hidden=0.2 * f if hidden else None, b_hidden=0.2 * b if hidden else None,
                               p2p_blocking=blocking)
            _same_split(x)
            shape, _, reps = pipeline_shape(x, share_buckets=True)
            assert reps == buckets and shape.ranked.blocks == p * v
            assert pipeline_shape(dataclasses.replace(x, buckets=buckets + 5), share_buckets=True)[0] is shape
            _same_split(dataclasses.replace(x, grad_overlap=False))
            assert pipeline_shape(dataclasses.replace(x, grad_overlap=False), share_buckets=True)[2] == 1


def test_shared_bucket_shape_defers_kahn_order_ties() -> None:
    """Uniform durations on the interleaved schedule with blocking sends: a task released at once by two
    dependencies of different kinds, where the Kahn orders of the shared shape and of the DAG with its own
    bucket count may pick differently. `relax_split` says so, and `pipeline_split` answers from the count's
    own shape: the same numbers as that DAG's."""
    p, v, m = 4, 2, 8
    x = PipelineInputs("interleaved", p, v, m, np.full((p, v), 2.0), np.full((p, v), 2.0), np.full((p, v), 4.0),
                       np.full((p, v), 4.0), np.ones(p), np.ones(p), 3, 1.0, np.ones(p), 0.0, (0,), (1,),
                       p2p_blocking=True)
    with Caches().active():
        shape, values, reps = pipeline_shape(x, share_buckets=True)
        r, n = shape.ranked, shape.ranked.nodes
        assert relax_split(values, n.src, n.csrc, n.pieces, n.hid, n.oth, r.succ_ptr, r.succ, n.stage, n.kind,
                           r.mine_ptr, r.mine, r.link, reps, r.chain)[2]
        _same_split(x)


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 4, 1, 8), ("1f1b", 1, 1, 5), ("interleaved", 4, 2, 8),
                                            ("interleaved", 3, 3, 6)])
def test_merged_steps_match_reference_and_never_slow_down(schedule, p, v, m) -> None:
    """moe_a2a_overlap inputs: numba and reference builders agree node for node; hiding EP time in merged
    steps never lengthens a node, and only paired actions change."""
    rng = np.random.default_rng(p * 100 + v * 10 + m)
    f, b = rng.uniform(0.5, 1.5, (p, v)), rng.uniform(1.0, 3.0, (p, v))
    args = (schedule, p, v, m, f, 0.8 * f, b, 0.8 * b, rng.uniform(0, 0.3, p), rng.uniform(0, 0.3, p), 0, 0.0,
            rng.uniform(0.1, 0.2, p), 0.0, (1,), (1,))
    plain = build_pipeline(PipelineInputs(*args))
    x = PipelineInputs(*args, f_hidden=0.2 * f, b_hidden=0.2 * b)
    fast, ref = build_pipeline(x), build_pipeline_reference(x)
    _same_graph(fast, ref)
    _same_split(x)
    assert np.all(fast.dur <= plain.dur) and np.any(fast.dur < plain.dur)
    step = lambda g: longest_path(g.dur, g.dep_ptr, g.dep_idx)[1].max()
    assert step(fast) <= step(plain)


@pytest.mark.parametrize("directions,units,expected", [
    ("FBFBFB", [0, 0, 1, 1, 2, 2], [-1, 2, 1, 4, 3, -1]),          # one stage: B(i) merges with F(i+1)
    ("FFFBFBBB", [0, 1, 2, 0, 3, 1, 2, 3], [-1, -1, 3, 2, 5, 4, -1, -1]),   # warm-up and cool-down alone
    ("FFFFBBBB", [0, 1, 2, 3, 0, 1, 2, 3], [-1, -1, -1, 4, 3, -1, -1, -1]),
])
def test_merged_partners(directions, units, expected) -> None:
    from rapidllm.graph.pipeline_dag import merged_partners
    fwd = np.array([d == "F" for d in directions])
    got = merged_partners(fwd, np.zeros(len(units), np.int64), np.array(units, np.int64))
    assert got.tolist() == expected


def test_builder_falls_back_outside_the_schedule_contract() -> None:
    """Interleaving with m not divisible by pp is not a schedule the engine produces: it goes to the reference."""
    p, v, m = 4, 2, 6
    f = np.ones((p, v))
    x = PipelineInputs("interleaved", p, v, m, f, f, 2 * f, 2 * f, np.zeros(p), np.zeros(p), optimizer_s=np.zeros(p))
    with pytest.raises(KeyError):                 # the reference's own failure (a consumer never scheduled)
        build_pipeline_reference(x)
    with pytest.raises(KeyError):                 # ... is what the fast path falls back to
        build_pipeline(x)


def _variants(gpt_case) -> list[dict]:
    w = gpt_case["workload"]
    par = gpt_case["parallelism"]
    return [
        {**gpt_case, "parallelism": {**par, "schedule": "1f1b"}},
        {**gpt_case, "parallelism": {**par, "schedule": "gpipe"}, "workload": {**w, "global_batch": 16}},
        {**gpt_case, "parallelism": {**par, "schedule": "interleaved", "virtual_stages": 2}},
        {**gpt_case, "parallelism": {**par, "pp": 4, "dp": 2, "zero": 1}, "workload": {**w, "global_batch": 32}},
        {**gpt_case, "parallelism": {**par, "pp": 4, "dp": 2, "zero": 0, "sp": False}, "workload": {**w, "global_batch": 32}},
        {**gpt_case, "parallelism": {**par, "pp": 2, "dp": 2, "zero": 3}, "workload": {**w, "global_batch": 8}},
        {**gpt_case, "parallelism": {**par, "pp": 4, "dp": 2, "zero": 1, "schedule": "interleaved", "virtual_stages": 3},
         "workload": {**w, "global_batch": 32}},
        {**gpt_case, "parallelism": {**par, "pp": 4, "dp": 2}, "workload": {**w, "global_batch": 16},
         "faults": [{"link": [0, 64], "bandwidth_factor": 0.5}, {"link": [16, 66], "extra_latency": "20 us"}]},
    ]


@pytest.mark.parametrize("k", range(8))
def test_prediction_equals_previous_path(gpt_case, monkeypatch, k) -> None:
    case = resolve_case(_variants(gpt_case)[k], "x")
    ops = price_case(case)
    with Caches().active():
        fast = training_record(case, ops)
    with Caches().active(), monkeypatch.context() as mp:
        mp.setattr(engine_mod, "pipeline_shape", lambda x, share_buckets=False: None)   # no shape: the builder's graph
        mp.setattr(engine_mod, "build_pipeline", build_pipeline_reference)
        mp.setattr(engine_mod, "attribute", attribute_reference)
        ref = training_record(case, ops)
    assert fast.keys() == ref.keys()
    for key, value in ref.items():
        if isinstance(value, float) and value != 0:
            assert fast[key] == pytest.approx(value, rel=1e-9, abs=0), key
        else:
            assert fast[key] == value, key
    assert fast["step_time_s"] == ref["step_time_s"]          # bit for bit


@pytest.mark.parametrize("par", [{"tp": 8, "pp": 8, "dp": 1}, {"tp": 2, "pp": 4, "dp": 8}, {"tp": 4, "pp": 2, "dp": 4, "cp": 2},
                                 {"tp": 1, "pp": 16, "dp": 4}])
@pytest.mark.parametrize("order", [None, ["pp", "dp", "cp", "tp", "ep"], ["dp", "tp", "pp", "cp", "ep"]])
def test_groups_equal_rank_by_rank_definition(gpt_case, par, order) -> None:
    from rapidllm.engine.comm_cost import CommCost
    net = dict(gpt_case["network"], **({"axis_order": order} if order else {}))
    world = par["tp"] * par["pp"] * par["dp"] * par.get("cp", 1)
    case = resolve_case({**gpt_case, "network": net, "parallelism": {**gpt_case["parallelism"], **par},
                         "workload": {**gpt_case["workload"], "global_batch": 8 * par["dp"]}}, "x")
    assert case.parallelism.world == world
    with Caches().active():
        cost = CommCost(case)
        for axis in ("tp", "cp", "dp", "pp"):
            for stage in (-1, 0, par["pp"] - 1):
                assert cost.groups(axis, stage) == groups_reference(cost, axis, stage), (axis, stage)
                assert cost.groups(axis, stage) == groups_reference(cost, axis, stage)      # cached path


def test_ops_view_matches_pandas_selections(gpt_case) -> None:
    """OpsView of the DataFrame and of the pandas-free OperatorTable select what boolean masks select."""
    from rapidllm.graph.templates import OpsView, case_templates, compute_durations
    from rapidllm.ops.price import price_table
    for recompute in ("selective", "full"):
        case = resolve_case({**gpt_case, "parallelism": {**gpt_case["parallelism"], "recompute": recompute}}, "x")
        ops = price_case(case)
        views = (OpsView(ops), OpsView(price_table(case)))
        for view in views:
            assert view.timed.dtype == np.float64 and view.work.dtype == np.float64
            assert np.array_equal(view.timed, ops.time_s.to_numpy() * ops["count"].to_numpy())
            assert np.array_equal(view.work, ops.flops.to_numpy() * ops["count"].to_numpy())
            for t in case_templates(case, ops):
                phases = {n.phase for n in t.nodes if n.kind == "compute"}
                sel = ops[(ops.section == t.section) & ops.phase.isin(phases)]
                assert compute_durations(view, t) == list(sel.time_s.to_numpy() * sel["count"].to_numpy())
            for section in sorted(set(ops.section)):
                for phases in (("fwd",), ("bwd",), ("recompute",), ("optimizer",), ("fwd", "bwd")):
                    sel = ops[(ops.section == section) & ops.phase.isin(phases)]
                    assert view.ops_of(section, phases) == list(zip(sel.name, sel.phase))


def test_sweep_expansion_equals_expand(gpt_case) -> None:
    import json

    from rapidllm.spec.experiment import Experiment, expand, expand_with_cases, load_experiment
    from rapidllm.spec.paths import config_dir
    inline = Experiment("inline", "test", {**gpt_case, "workload": {**gpt_case["workload"], "global_batch": 16}},
                        {"parallelism.recompute": ["selective", "full"]},
                        [{"label": "a", "meta": {"k": 1}}, {"label": "b", "parallelism": {"cp": 3}}],
                        {"gpus": 64, "axes": ["dp", "tp", "pp"], "bounds": {"tp": [4, 8]}}, 7)
    statuses = set()
    for exp in (load_experiment(config_dir("experiment") / "llama70b-layouts.yaml"), inline):
        pairs = expand_with_cases(exp)
        assert [row for row, _ in pairs] == expand(exp)
        statuses |= {row["status"] for row, _ in pairs}
        for row, case in pairs:
            if row["status"] == "ok":
                assert case == resolve_case(json.loads(row["case_json"]), row["label"])
            else:
                assert case is None
    assert statuses == {"ok", "invalid"}


def test_cached_pricing_equals_the_reference_over_sweep_cases():
    """price_case reuses the layer sections across dp/pp/ZeRO variants; every frame must equal the uncached
    definition exactly (values, dtypes, order), optimizer row included."""
    import json

    from rapidllm.ops.price import price_case, price_case_reference
    from rapidllm.spec.case import resolve_case
    from rapidllm.spec.experiment import expand, load_experiment
    from rapidllm.spec.paths import project_root

    rows = [r for r in expand(load_experiment(project_root() / "config" / "experiments" / "sweep-1000.yaml"))
            if r["status"] == "ok"][::7]
    with Caches().active():
        for r in rows:
            case = resolve_case(json.loads(r["case_json"]), r["label"])
            pd.testing.assert_frame_equal(price_case(case), price_case_reference(case))
