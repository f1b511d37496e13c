"""The sweep fast paths (issue 7, item 7) return exactly what the plain paths return.

Each cache or compiled loop added for sweep throughput is compared with the code it replaced: the numba
activation walk with the Python schedule walk, the cached GEMM/attention prices with fresh ones, the
direct case hash with the `dataclasses.asdict` one, and cached spec resolution with a fresh one.
"""
from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from rapidllm.memory.liveness import LayerLiveness
from rapidllm.memory.model import _walk_peak, walk_inputs
from rapidllm.spec.schedule import schedule_code
from reference_impls import activation_peak_reference, case_id_reference, training_memory_reference
from rapidllm.spec.layout import Parallelism, TrainingWorkload


@pytest.mark.parametrize("schedule,pp,v", [("1f1b", 1, 1), ("gpipe", 1, 1), ("gpipe", 4, 1), ("1f1b", 4, 1),
                                           ("1f1b", 8, 1), ("interleaved", 4, 2), ("interleaved", 8, 3),
                                           ("interleaved", 1, 2)])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activation_walk_equals_python_walk(schedule, pp, v, recompute) -> None:
    rng = random.Random(hash((schedule, pp, v, recompute)) & 0xFFFF)
    for global_batch, dp, mb in itertools.product((1, 3, 8, 24, 64), (1, 2), (1, 2)):
        if global_batch % (dp * mb):
            continue
        par = Parallelism(pp=pp, dp=dp, schedule=schedule, virtual_stages=v, recompute=recompute)
        case = SimpleNamespace(parallelism=par, workload=TrainingWorkload(2048, global_batch, mb))
        layer = LayerLiveness(*(rng.uniform(1e6, 1e9) for _ in range(4)))
        head = LayerLiveness(*(rng.choice([0.0, rng.uniform(1e6, 1e10)]) for _ in range(4)))
        for stage in range(pp):
            layers = rng.choice([1, 2, 3, 7, 12])
            x = walk_inputs(case, stage, layer, head, layers)
            walked = _walk_peak(schedule_code(par.schedule, pp, x.chunks), pp, stage,
                                max(case.workload.microbatches(dp), 1), x.chunks, x.last, float(x.per_chunk),
                                float(x.head_stored), float(x.fwd_extra), float(x.bwd_extra))
            assert float(walked) == activation_peak_reference(case, stage, layer, head, layers)


def _sweep_cases(n: int = 120) -> list:
    from rapidllm.spec.experiment import expand_with_cases
    from rapidllm.spec.experiment import load_experiment
    from rapidllm.spec.paths import config_dir

    exp = load_experiment(config_dir("experiment") / "sweep-1000.yaml")
    cases = [c for _, c in expand_with_cases(exp) if c is not None]
    return random.Random(7).sample(cases, n)


def test_memory_of_all_stages_in_one_walk_equals_per_stage_results() -> None:
    """`memory_for_case` walks every stage in one kernel call; the stage it reports and every byte count
    equal a `MemoryResult` per stage and the max by peak (`training_memory_reference`), nanotron's uneven
    split and ZeRO-3 included."""
    import dataclasses

    from rapidllm.memory.model import memory_for_case

    cases = _sweep_cases(80)
    cases += [dataclasses.replace(c, framework="nanotron") for c in cases[:10]]
    cases += [dataclasses.replace(c, parallelism=dataclasses.replace(c.parallelism, zero=3)) for c in cases[10:20]]
    for c in cases:
        assert memory_for_case(c) == training_memory_reference(c)


def test_case_id_equals_asdict_hash(gpt_case) -> None:
    from rapidllm.spec.case import resolve_case

    from rapidllm.spec.experiment import expand_with_cases, load_experiment
    from rapidllm.spec.paths import config_dir

    faults = [c for _, c in expand_with_cases(load_experiment(config_dir("experiment") / "case-faults.yaml"),
                                              case_json=False)[:600:40] if c is not None]
    cases = _sweep_cases() + [resolve_case(gpt_case, "test")] + faults    # faults: a network per case
    for c in cases:
        assert c.case_id == case_id_reference(c)


def test_cached_operator_prices_equal_fresh_ones() -> None:
    import numpy as np
    import pandas as pd

    from rapidllm.ops import price

    cases = _sweep_cases(60)
    warm = [price.price_case(c) for c in cases]           # shapes shared across cases come from the cache
    for c, got in zip(cases, warm):
        pairs = price.case_sections(c)
        ops = [o for _, o in pairs]
        gi = [i for i, o in enumerate(ops) if o.kind == "gemm"]
        shapes = np.array([ops[i].gemm for i in gi], dtype=np.int64)
        fresh = price.price_gemms(c.hardware, shapes[:, 0], shapes[:, 1], shapes[:, 2], shapes[:, 3], c.precision)
        assert np.array_equal(got["time_s"].to_numpy()[gi], fresh.time_s)
        rows = [(s, o.name, o.kind, o.phase, o.count, o.flops, o.bytes, o.out_bytes,
                 *(o.gemm if o.gemm else (0, 0, 0, 0)), float(t)) for (s, o), t in zip(pairs, got["time_s"])]
        ref = pd.DataFrame(rows, columns=price.OPERATOR_COLUMNS)
        assert got.equals(ref) and list(got.dtypes) == list(ref.dtypes)


def test_inline_validation_cache_still_rejects_bad_specs() -> None:
    from rapidllm.spec.errors import SpecError
    from rapidllm.spec.named import resolve_named

    good, _ = resolve_named("hardware", "a100-sxm4-80gb", "test", "hardware")
    resolve_named("hardware", good, "test", "hardware")
    resolve_named("hardware", good, "test", "hardware")          # cached
    bad = {**good, "hbm_bandwidth": "3.35 TB"}
    for _ in range(2):
        with pytest.raises(SpecError):
            resolve_named("hardware", bad, "test", "hardware")


def test_project_root_follows_env(tmp_path, monkeypatch) -> None:
    from rapidllm.spec.paths import project_root

    default = project_root()
    monkeypatch.setenv("RAPIDLLM_ROOT", str(tmp_path))
    assert project_root() == tmp_path.resolve()
    monkeypatch.delenv("RAPIDLLM_ROOT")
    assert project_root() == default


def test_text_memos_equal_fresh_text() -> None:
    """The id-keyed text memos (a device's repr for the pricing key, a shared spec's JSON for case ids)
    return what a fresh repr / dump gives, for shared specs and for a new object of equal value, and the
    pricing key tells layouts apart exactly as the neutralized parallelism it replaced."""
    import dataclasses

    from rapidllm.ops.price import _hardware_repr, _layer_pricing_key
    from rapidllm.spec.case_id import json_text as _json_text, plain as _plain, spec_json as _spec_json

    cases = _sweep_cases(40)
    for c in cases + [dataclasses.replace(cases[0], hardware=cases[0].hardware.at_clock(1.2e9))]:
        assert _hardware_repr(c.hardware) == repr(c.hardware)
        for spec in (c.model, c.hardware, c.network, dataclasses.replace(c.network)):
            assert _spec_json(spec) == _json_text(_plain(spec))
    neutral = dict(dp=1, pp=1, zero=0, fsdp="none", schedule="1f1b", virtual_stages=1, embedding_in_split=False,
                   loss_in_split=False)
    for a, b in itertools.combinations(cases[:25], 2):
        same = dataclasses.replace(a.parallelism, **neutral) == dataclasses.replace(b.parallelism, **neutral)
        assert (_layer_pricing_key(a, "tiles")[3] == _layer_pricing_key(b, "tiles")[3]) == same


def test_shared_row_durations_equal_fresh_ones() -> None:
    """Compute durations remembered per template and shared layer rows (`compute_durations` on a table from
    `price_table`, which shares its priced layers across cases) equal the ones selected from a fresh
    DataFrame of the same case, for every template, hit or miss."""
    from rapidllm.caches import Caches
    from rapidllm.graph.templates import OpsView, compute_durations, ops_view, shared_case_templates
    from rapidllm.ops.price import price_case, price_table

    with Caches().active():
        for c in _sweep_cases(40) * 2:                  # the second round hits
            view = ops_view(price_table(c))
            assert view.shared is not None
            fresh = OpsView(price_case(c))
            for t in shared_case_templates(c, view):
                got = compute_durations(view, t)
                assert got == fresh.durations(t.section, {n.phase for n in t.nodes if n.kind == "compute"})
